"""Token ids -> sparse embeddings (SPLADE), through the checkpoint's sentence-transformers SparseEncoder.

The folder's modules run as `modules.json` declares (a masked LM under `SpladePooling`); a bare
`*ForMaskedLM` served with `kind: sparse` gets sentence-transformers' default, SPLADE max pooling. Each
output holds only the active entries: their vocabulary indices over their weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from config.settings import ModelConfig
from models.base import ModelInfo, TokenizedText
from models.inference.padding import pad_rows
from models.kinds import Kind
from models.preprocessing.text_settings import read_text_settings


class SparseTextEncoder:
    """The `TokenModel` of sparse embedders on the torch backend."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind = "sparse") -> None:
        from sentence_transformers import SparseEncoder

        from models.inference.device import load_on_device

        self._model, device, dtype = load_on_device(SparseEncoder, folder, cfg, "fill-mask")
        self._tokenizer = self._model.tokenizer
        self._device = device
        settings = read_text_settings(folder, cfg, self._tokenizer.model_max_length)
        self._model.max_seq_length = settings.max_seq_length
        self.info = ModelInfo.of(
            cfg,
            kind,
            dimension=int(self._model.transformers_model.config.vocab_size),
            max_input_tokens=settings.max_seq_length,
            normalized=False,
            device=device,
            dtype=dtype,
        )

    def forward(self, rows: Sequence[TokenizedText]) -> list[np.ndarray]:
        import torch
        from sentence_transformers.util import select_max_active_dims

        features = pad_rows(rows, self._tokenizer, self._device, non_blocking=self.info.backend == "torch")
        with torch.inference_mode():
            weights = self._model({**features, "modality": "text"})["sentence_embedding"]
            # the checkpoint's own cap (None: none), as SparseEncoder.encode applies it
            weights = select_max_active_dims(weights, self._model.max_active_dims).float().cpu()
        return [active_entries(row) for row in weights]


def active_entries(weights: object) -> np.ndarray:
    """A dense weight vector (torch) -> its (2, active) [indices; weights], indices ascending. Vocabulary
    indices stay exact in float32 (below 2**24)."""
    import torch

    assert isinstance(weights, torch.Tensor)
    indices = torch.nonzero(weights).squeeze(1)
    return np.stack([indices.numpy().astype(np.float32), weights[indices].numpy()])
