"""Cache keys: one per input, a BLAKE2b hash of everything that makes its output.

- The model (`model_identity`): its weights (the Hub commit, or a hash of a local folder's files), every setting
  that changes an output (pooling, prompts, templates, limits, ...), and the kind, backend and dtype in force.
- The request (`context`): the operation, the prompt or instruction actually applied, the truncation in force,
  the input type, the normalization, the representations asked: whatever the operation's outputs depend on.
- The input's own bytes, tagged by what they are (text, token ids, image, audio, a pair of texts).

Output-only controls (`dimensions`, `encoding_format`, quantization, `max_active_dims`, activations, `top_n`)
are applied after the cache and are not part of a key: one stored output serves them all.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.settings import ModelConfig
from gateway.cache.values import FORMAT_VERSION
from models.base import ModelInfo

DIGEST_BYTES = 32
# Settings that change how outputs leave or how the model is run, never an output itself.
OUTPUT_ONLY_SETTINGS = {
    "served_model_name",
    "model_id",
    "revision",
    "device",
    "batch_size",
    "max_batch_tokens",
    "quantization",
    "quantization_ranges",
    "allow_token_ids",
    "cache",
}
ITEM_TAGS = {"text": b"T", "image": b"I", "audio": b"A", "ids": b"N", "pair": b"P"}
LENGTH = struct.Struct("<Q")


def model_identity(cfg: ModelConfig, info: ModelInfo, folder: Path) -> bytes:
    """What makes this model's outputs, as one digest. Reads every file of a local folder: run it off the loop."""
    material = {
        "weights": weights_identity(cfg.model_id, folder),
        "settings": cfg.model_dump(mode="json", exclude=OUTPUT_ONLY_SETTINGS),
        "kind": info.kind,
        "backend": info.backend,
        "dtype": info.dtype,
        "format": FORMAT_VERSION,
    }
    return _digest(json.dumps(material, sort_keys=True).encode())


def weights_identity(model_id: str, folder: Path) -> str:
    """A Hub checkpoint by its commit (the snapshot folder's name), anything else by its files' contents."""
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return f"hub:{model_id}@{folder.name}"
    files = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):  # .git, a download's .cache
            continue
        with path.open("rb") as file:
            content = hashlib.file_digest(file, lambda: hashlib.blake2b(digest_size=DIGEST_BYTES)).digest()
        files.update(str(relative).encode() + b"\0" + content)
    return f"files:{files.hexdigest()}"


class CacheKeys:
    """The keys of one model's inputs, from its identity."""

    def __init__(self, identity: bytes) -> None:
        self.identity = identity

    def keys(self, context: Mapping[str, Any], items: Iterable[bytes]) -> list[bytes]:
        """Each item's key under the request's `context` (JSON-able); items come from `item_bytes`."""
        scope = _digest(json.dumps(context, sort_keys=True).encode(), key=self.identity)
        return [_digest(item, key=scope) for item in items]


def item_bytes(modality: str, value: str | bytes | Sequence[int]) -> bytes:
    """An input's bytes for its key, tagged so that a text and an image (or token ids) of equal bytes differ."""
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
    elif isinstance(value, bytes):
        data = value
    else:
        modality, data = "ids", np.asarray(value, dtype=np.int64).tobytes()
    return ITEM_TAGS[modality] + data


def pair_bytes(first: str, second: str | None) -> bytes:
    """A (query, document) or (text, pair) input: the first text's length keeps the boundary unambiguous."""
    head = first.encode("utf-8", "surrogatepass")
    tail = b"\xff" if second is None else b"\0" + second.encode("utf-8", "surrogatepass")  # no pair: not ""
    return ITEM_TAGS["pair"] + LENGTH.pack(len(head)) + head + tail


def _digest(data: bytes, key: bytes = b"") -> bytes:
    return hashlib.blake2b(data, key=key, digest_size=DIGEST_BYTES).digest()
