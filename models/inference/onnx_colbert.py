"""Token ids -> one unit vector per token on ONNX Runtime with numpy alone, for ColBERT text models in PyLate's
layout: no torch, transformers' model code or sentence-transformers in the process.

`ColbertEncoder` on ONNX Runtime runs the export (the transformer's token states) and then PyLate's Dense
projection and the L2 normalization in torch; here both are numpy over the same weights, read from their
safetensors file. Queries keep every position, documents drop their skiplist tokens, expansion tokens get no
attention unless the model says so: as `ColbertEncoder` does. A projection whose weights are only in a pickle
raises `TorchNeeded`: `ColbertEncoder` loads it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.base import ModelInfo, TokenizedText
from models.inference.backends import check_device
from models.inference.colbert_encoder import IDENTITY, PYLATE_DENSE
from models.inference.onnx_text import fast_tokenizer, open_session, token_content, tokenizer_files
from models.inference.padding import padded_ids
from models.inference.sentence_head import TorchNeeded
from models.inference.token_states import row_offsets
from models.kinds import Kind
from models.preprocessing.colbert_texts import ColbertSettings
from models.resolve import read_json


class Projection:
    """PyLate's Dense as data: a bias-free (unless configured) linear map of each token state, plus with
    `use_residual` the state itself or its own linear map of it."""

    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file

        entry = next(
            (m for m in json.loads((folder / "modules.json").read_text()) if m.get("type") == PYLATE_DENSE), None
        )
        if entry is None:
            raise ModelLoadError(f"{folder} declares a ColBERT model but modules.json names no {PYLATE_DENSE} module")
        where = folder / entry["path"]
        config = json.loads((where / "config.json").read_text())
        activation = config.get("activation_function", IDENTITY)
        if activation != IDENTITY:
            raise ModelLoadError(f"{where}: PyLate's Dense with activation {activation} is not served (only identity)")
        if not (where / "model.safetensors").is_file():
            raise TorchNeeded(f"its projection's weights are not in safetensors ({where})")
        weights = {
            name: array.astype(np.float32) for name, array in load_file(str(where / "model.safetensors")).items()
        }
        self.out_features = int(config["out_features"])
        self._weight = weights["linear.weight"]  # (out, in)
        self._bias = weights.get("linear.bias") if config.get("bias", False) else None
        self._residual = bool(config.get("use_residual", False))
        self._residual_weight = weights.get("residual.weight") if self._residual else None

    def __call__(self, states: np.ndarray) -> np.ndarray:
        projected = states @ self._weight.T
        if self._bias is not None:
            projected = projected + self._bias
        if not self._residual:
            return projected
        return projected + (states @ self._residual_weight.T if self._residual_weight is not None else states)


class OnnxColbertEncoder:
    """The `TokenModel` of ColBERT text models on ONNX Runtime without torch (`KindSpec.torch_free_loader`)."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind = "colbert") -> None:
        check_device(cfg, "cpu")
        self._settings = ColbertSettings.read(folder)
        self._projection = Projection(folder)
        self._pad_id, self._pad_left, _ = tokenizer_files(folder)
        self._skiplist = _skiplist(folder, self._settings.skiplist_words)
        self._session = open_session(folder, cfg, kind)
        self._inputs = [tensor.name for tensor in self._session.get_inputs()]
        self.info = ModelInfo.of(
            cfg,
            kind,
            dimension=self._projection.out_features,
            max_input_tokens=self._settings.longest,
            normalized=True,
            device="cpu",
            dtype="int8" if cfg.dtype == "int8" else "float32",
        )

    def forward(self, rows: Sequence[TokenizedText]) -> list[np.ndarray]:
        batch = padded_ids(rows, self._pad_id, self._pad_left)
        offsets = row_offsets(batch["input_ids"].shape[1], [row.length for row in rows], self._pad_left)
        if not self._settings.attend_to_expansion_tokens:
            for index, (row, offset) in enumerate(zip(rows, offsets)):  # expansion tokens: vectors, no attention
                batch["attention_mask"][index, offset + row.length - row.expansion : offset + row.length] = 0
        feeds = {name: batch.get(name, np.zeros_like(batch["input_ids"])) for name in self._inputs}
        states = self._session.run(None, feeds)[0]  # (rows, positions, hidden): last_hidden_state
        kept = [offset + self._kept(row) for row, offset in zip(rows, offsets)]
        gathered = states[np.repeat(np.arange(len(rows)), [len(keep) for keep in kept]), np.concatenate(kept)]
        vectors = self._projection(gathered.astype(np.float32))
        # torch.nn.functional.normalize: each vector over the larger of its norm and 1e-12
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
        return np.split(vectors.astype(np.float32), np.cumsum([len(keep) for keep in kept])[:-1])

    def _kept(self, row: TokenizedText) -> np.ndarray:
        """The positions whose vectors a row answers: all of a query's, a document's but its skiplist tokens."""
        if row.is_query:
            return np.arange(row.length)
        return np.flatnonzero(~np.isin(row.input_ids, self._skiplist))


def _skiplist(folder: Path, words: Sequence[str]) -> np.ndarray:
    """The skiplist's token ids as transformers' `convert_tokens_to_ids` gives them: a word outside the
    vocabulary is the unknown token's id (a document's unknown tokens are dropped with the punctuation)."""
    vocabulary = fast_tokenizer(folder)
    if vocabulary is None:
        raise TorchNeeded("it has no tokenizer.json to read its skiplist's ids from")
    config = read_json(folder / "tokenizer_config.json")
    unknown = token_content(config.get("unk_token") or read_json(folder / "special_tokens_map.json").get("unk_token"))
    unknown_id = None if unknown is None else vocabulary.token_to_id(unknown)
    ids = {vocabulary.token_to_id(word) for word in words}
    ids = {unknown_id if found is None else found for found in ids} - {None}
    return np.array(sorted(ids))
