"""What a checkpoint is for (embed, rerank, classify), read from its files unless configured.

A `*ForSequenceClassification` head (which includes sentence-transformers CrossEncoder folders) with one
label scores (query, document) pairs: a reranker. With two or more labels it is a classifier. Anything
else is served as an embedder.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from models.base import Kind
from models.config import ModelConfig
from models.errors import ModelLoadError
from models.resolve import read_json, resolve_model


def label_count(config: dict[str, Any]) -> int:
    """transformers' rule: `id2label` when present, else `num_labels`, else its default of 2."""
    if config.get("id2label"):
        return len(config["id2label"])
    return int(config.get("num_labels", 2))


def detect_kind(folder: Path) -> Kind:
    config = read_json(folder / "config.json")
    architectures = config.get("architectures") or []
    if any(name.endswith("ForSequenceClassification") for name in architectures):
        return "rerank" if label_count(config) == 1 else "classify"
    if read_json(folder / "config_sentence_transformers.json").get("model_type") == "CrossEncoder":
        # A CrossEncoder over a causal LM scores with a chat template the gateway does not apply yet.
        raise ModelLoadError(
            f"{folder} is a CrossEncoder over {architectures or 'an unknown architecture'}; only "
            "*ForSequenceClassification cross-encoders are supported"
        )
    return "embed"


def model_kind(cfg: ModelConfig) -> Kind:
    """The configured kind, or the one the checkpoint's files declare."""
    return cfg.kind if cfg.kind != "auto" else _detected_kind(cfg.model_id, cfg.revision)


@cache
def _detected_kind(model_id: str, revision: str | None) -> Kind:
    return detect_kind(resolve_model(model_id, revision))
