"""Token ids -> one unit vector per token, for ColBERT text models in PyLate's layout: the transformer, then
PyLate's Dense projection (no bias; optionally with a residual), each vector L2-normalized, as PyLate encodes.

The gateway frames queries and documents (`models.preprocessing.colbert_texts`); here a query row keeps every position,
its expansion tokens included, and a document row drops its skiplist tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.base import ModelInfo, TokenizedText
from models.inference.padding import pad_rows
from models.inference.token_states import load_transformer, row_offsets
from models.kinds import Kind
from models.preprocessing.colbert_texts import ColbertSettings

PYLATE_DENSE = "pylate.models.Dense.Dense"
IDENTITY = "torch.nn.modules.linear.Identity"


class ColbertEncoder:
    """The `TokenModel` of ColBERT text models (torch and ONNX Runtime)."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind = "colbert") -> None:
        self._model, device, dtype = load_transformer(folder, cfg)
        self._tokenizer = self._model.tokenizer
        self._device = device
        self._settings = ColbertSettings.read(folder)
        self._projection = load_projection(folder).to(device=device, dtype=self._states_dtype(dtype)).eval()
        skiplist = {self._tokenizer.convert_tokens_to_ids(word) for word in self._settings.skiplist_words}
        self._skiplist = np.array(sorted(skiplist))
        self.info = ModelInfo.of(
            cfg,
            kind,
            dimension=int(self._projection.out_features),
            max_input_tokens=self._settings.longest,
            normalized=True,
            device=device,
            dtype=dtype,
        )

    @staticmethod
    def _states_dtype(dtype: str) -> Any:
        import torch

        return getattr(torch, dtype) if dtype in ("float16", "bfloat16") else torch.float32

    def forward(self, rows: Sequence[TokenizedText]) -> list[np.ndarray]:
        import torch

        features = pad_rows(rows, self._tokenizer, self._device, non_blocking=self.info.backend == "torch")
        width, left = features["input_ids"].shape[1], self._tokenizer.padding_side == "left"
        offsets = row_offsets(width, [row.length for row in rows], left)
        if not self._settings.attend_to_expansion_tokens:
            features["attention_mask"] = _without_expansion(features["attention_mask"], rows, offsets)
        with torch.inference_mode():
            states = self._model[0]({**features, "modality": "text"})["token_embeddings"]
            vectors = torch.nn.functional.normalize(self._projection(states.to(self._projection.dtype)), dim=-1)
            kept = [offset + self._kept(row) for row, offset in zip(rows, offsets)]
            # the kept vectors of every row gathered on the device and copied to the host at once
            at_row = torch.tensor(np.repeat(np.arange(len(rows)), [len(keep) for keep in kept]), device=states.device)
            at_position = torch.tensor(np.concatenate(kept), device=states.device)
            host = vectors[at_row, at_position].float().cpu().numpy()
        return np.split(host, np.cumsum([len(keep) for keep in kept])[:-1])

    def _kept(self, row: TokenizedText) -> np.ndarray:
        """The positions whose vectors a row answers: all of a query's, a document's but its skiplist tokens."""
        if row.is_query:
            return np.arange(row.length)
        return np.flatnonzero(~np.isin(row.input_ids, self._skiplist))


def _without_expansion(mask: Any, rows: Sequence[TokenizedText], offsets: list[int]) -> Any:
    """Query expansion tokens get vectors but, unless the model says otherwise, no attention."""
    if not any(row.expansion for row in rows):
        return mask
    mask = mask.clone()
    for index, (row, offset) in enumerate(zip(rows, offsets)):
        mask[index, offset + row.length - row.expansion : offset + row.length] = 0
    return mask


def load_projection(folder: Path) -> Any:
    """PyLate's Dense module, from the folder `modules.json` names for it: a bias-free linear map of each token
    state, plus (with `use_residual`) the state itself or its own linear map of it."""
    import torch

    entry = next((m for m in json.loads((folder / "modules.json").read_text()) if m.get("type") == PYLATE_DENSE), None)
    if entry is None:
        raise ModelLoadError(f"{folder} declares a ColBERT model but modules.json names no {PYLATE_DENSE} module")
    where = folder / entry["path"]
    config = json.loads((where / "config.json").read_text())
    activation = config.get("activation_function", IDENTITY)
    if activation != IDENTITY:
        raise ModelLoadError(f"{where}: PyLate's Dense with activation {activation} is not served (only identity)")
    return projection_module(
        config["in_features"],
        config["out_features"],
        bool(config.get("bias", False)),
        bool(config.get("use_residual", False)),
        _state_dict(where, torch),
    )


def _state_dict(where: Path, torch: Any) -> dict[str, Any]:
    if (where / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(where / "model.safetensors"))
    return torch.load(where / "pytorch_model.bin", map_location="cpu", weights_only=True)


def projection_module(in_features: int, out_features: int, bias: bool, residual: bool, weights: dict[str, Any]) -> Any:
    """The projection as a torch module (built here: torch is imported on the model service only)."""
    import torch

    class _Projection(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            self.linear = torch.nn.Linear(in_features, out_features, bias=bias)
            self.use_residual = residual
            if residual and in_features != out_features:
                self.residual = torch.nn.Linear(in_features, out_features, bias=False)

        @property
        def dtype(self) -> Any:
            return self.linear.weight.dtype

        def forward(self, states: Any) -> Any:
            projected = self.linear(states)
            if not self.use_residual:
                return projected
            return projected + (self.residual(states) if hasattr(self, "residual") else states)

    module = _Projection()
    module.load_state_dict(weights)
    return module
