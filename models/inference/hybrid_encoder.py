"""Token ids -> BGE-M3's three representations from one pass over the encoder (FlagEmbedding's layout: the
encoder, with `colbert_linear.pt` and `sparse_linear.pt` beside it), as `BGEM3FlagModel.encode` computes them:

- dense: the first token's final state, normalized;
- sparse: `relu(sparse_linear(h))` per token, the largest weight of each vocabulary id, without the CLS, EOS,
  pad and unknown ids and without zero weights;
- colbert: `colbert_linear(h)` over every token but the first (the closing `</s>` included), each normalized.

A row that names no representations gets its dense vector, as any embedder's (warm-up, calibration); one that
names some gets them packed into its one output, in the order named (`models.packing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.settings import ModelConfig
from models.base import ModelInfo, Representation, TokenizedText
from models.inference.padding import pad_rows
from models.inference.token_states import load_transformer, row_offsets
from models.kinds import HYBRID_HEADS, Kind
from models.packing import pack_arrays
from models.preprocessing.text_settings import read_text_settings

COLBERT_HEAD, SPARSE_HEAD = HYBRID_HEADS


class HybridEncoder:
    """The `TokenModel` of BGE-M3-style models on the torch backend."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind = "hybrid") -> None:
        import torch

        self._model, device, dtype = load_transformer(folder, cfg)
        self._tokenizer = tokenizer = self._model.tokenizer
        self._device = device
        heads_dtype = getattr(torch, dtype)
        self._colbert = _linear_head(folder / COLBERT_HEAD).to(device=device, dtype=heads_dtype).eval()
        self._sparse = _linear_head(folder / SPARSE_HEAD).to(device=device, dtype=heads_dtype).eval()
        unused = {tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}
        self._unused = np.array(sorted(i for i in unused if i is not None))
        settings = read_text_settings(folder, cfg, tokenizer.model_max_length)
        self.info = ModelInfo.of(
            cfg,
            kind,
            dimension=int(self._colbert.in_features),
            max_input_tokens=settings.max_seq_length,
            normalized=True,
            device=device,
            dtype=dtype,
        )

    def forward(self, rows: Sequence[TokenizedText]) -> list[np.ndarray]:
        import torch

        features = pad_rows(rows, self._tokenizer, self._device, non_blocking=self.info.backend == "torch")
        ids = features["input_ids"]
        offsets = row_offsets(ids.shape[1], [row.length for row in rows], self._tokenizer.padding_side == "left")
        spans = [slice(offset, offset + row.length) for row, offset in zip(rows, offsets)]
        wanted = {name for row in rows for name in row.representations or ("dense",)}
        with torch.inference_mode():
            states = self._model[0]({**features, "modality": "text"})["token_embeddings"]
            first = states[torch.arange(len(rows), device=states.device), torch.tensor(offsets, device=states.device)]
            # each output in one copy to the host: the pass's dense vectors, its token weights, and the ColBERT
            # vectors of every row's tokens but its first
            dense = torch.nn.functional.normalize(first, dim=-1).float().cpu().numpy()
            weights = torch.relu(self._sparse(states)).squeeze(-1).float().cpu().numpy() if "sparse" in wanted else None
            colbert = self._colbert_vectors(states, spans) if "colbert" in wanted else None
        outputs = []
        for index, (row, span) in enumerate(zip(rows, spans)):
            if row.representations is None:
                outputs.append(dense[index])
                continue
            made: dict[Representation, np.ndarray] = {"dense": dense[index]}
            if "sparse" in row.representations:
                assert weights is not None  # made for every pass where a row asks for them (`wanted`)
                made["sparse"] = self._lexical_weights(np.asarray(row.input_ids), weights[index, span])
            if "colbert" in row.representations:
                assert colbert is not None  # likewise
                made["colbert"] = colbert[index]
            outputs.append(pack_arrays([made[name] for name in row.representations]))
        return outputs

    def _colbert_vectors(self, states: Any, spans: list[slice]) -> list[np.ndarray]:
        """Each row's normalized ColBERT vectors, over its tokens but the first."""
        import torch

        tails = [states[i, span.start + 1 : span.stop] for i, span in enumerate(spans)]
        host = torch.nn.functional.normalize(self._colbert(torch.cat(tails)), dim=-1).float().cpu().numpy()
        return np.split(host, np.cumsum([len(tail) for tail in tails])[:-1])

    def _lexical_weights(self, ids: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """(2, active): each vocabulary id's largest weight, ids ascending, without the unused ids and zeros."""
        unique, position = np.unique(ids, return_inverse=True)
        best = np.zeros(len(unique), np.float32)
        np.maximum.at(best, position, weights)
        keep = (best > 0) & ~np.isin(unique, self._unused)
        return np.stack([unique[keep].astype(np.float32), best[keep]])


def _linear_head(path: Path) -> Any:
    """A `torch.nn.Linear` from the state dict FlagEmbedding saved (its shape read from the weights)."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    out_features, in_features = state["weight"].shape
    head = torch.nn.Linear(in_features, out_features, bias="bias" in state)
    head.load_state_dict(state)
    return head
