"""Token ids -> sentence embeddings on ONNX Runtime with numpy alone: no torch, transformers or
sentence-transformers in the process (issue 51: a text model service's idle memory).

The gateway sends token ids, so no tokenizer is loaded: its padding side and pad id are read from its files. The
export's session gives the token states; the checkpoint's Pooling, Dense and Normalize modules are read as data
and applied in numpy (`models.inference.sentence_head`). Each row is served as `TextEncoder` serves it on torch:
its own `normalize`, its prompt left out of pooling where the pooling says `include_prompt: false`, span sums
for late chunking.

For `backend: auto` it serves a model only once the export's parity verdict is recorded: taking it needs the
torch-backed class, which the first start loads, in its process, as before. For `backend: onnx` it makes the
export itself when no start has (torch's exporter, without sentence-transformers), or adopts the one a Bento
carries (`models.inference.auto_backend.load_torch_free`). The rerankers' and classifiers' twin is
`onnx_scorer`, ColBERT's `onnx_colbert`; what they share is `onnx_text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from config.settings import ModelConfig
from models.base import ModelInfo, TokenizedText
from models.inference.backends import check_device
from models.inference.onnx_text import open_session, read_text_settings, tokenizer_files
from models.inference.padding import padded_ids
from models.inference.sentence_head import SentenceHead, read_head
from models.kinds import Kind


class OnnxTextEncoder:
    """The `TokenModel` of text embedders on ONNX Runtime without torch (`KindSpec.torch_free_loader`). Raises
    `sentence_head.TorchNeeded` for a checkpoint whose modules it cannot run."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind = "embed") -> None:
        check_device(cfg, "cpu")
        self._head: SentenceHead = read_head(folder, cfg)
        self._pad_id, self._pad_left, model_max_length = tokenizer_files(folder)
        settings = read_text_settings(folder, cfg, model_max_length)
        self._session = open_session(folder, cfg, kind)
        self._inputs = [tensor.name for tensor in self._session.get_inputs()]
        hidden = self._session.get_outputs()[0].shape[-1]  # the token states' width: fixed by the export
        self.info = ModelInfo.of(
            cfg,
            kind,
            dimension=self._head.dimension(int(hidden)),
            max_input_tokens=settings.max_seq_length,
            normalized=self._head.normalized,
            device="cpu",
            dtype="int8" if cfg.dtype == "int8" else "float32",
        )

    def forward(self, rows: Sequence[TokenizedText]) -> np.ndarray | list[np.ndarray]:
        batch = padded_ids(rows, self._pad_id, self._pad_left)
        feeds = {name: batch.get(name, np.zeros_like(batch["input_ids"])) for name in self._inputs}
        states = self._session.run(None, feeds)[0]  # (rows, positions, hidden): last_hidden_state
        mask, width = batch["attention_mask"], batch["input_ids"].shape[1]
        starts = np.array([width - row.length if self._pad_left else 0 for row in rows])
        if not self._head.include_prompt:  # each row's own prompt (sentence-transformers assumes one per batch)
            mask = mask.copy()
            for index, row in enumerate(rows):
                mask[index, starts[index] : starts[index] + row.prompt_length] = 0
        vectors = self._normalized(self._head(states, mask), rows)
        if all(row.spans is None for row in rows):
            return vectors
        return [  # late chunking: a spanned row's sums of its final token states over each span, float32
            vectors[index]
            if row.spans is None
            else np.stack([states[index, starts[index] + a : starts[index] + b].sum(axis=0) for a, b in row.spans])
            for index, row in enumerate(rows)
        ]

    def _normalized(self, vectors: np.ndarray, rows: Sequence[TokenizedText]) -> np.ndarray:
        """Unit length for the rows that ask for it (None: the model's own behaviour), as Normalize computes it."""
        wanted = np.array([self._head.normalized if row.normalize is None else row.normalize for row in rows])
        norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return np.where(wanted[:, None], vectors / norms, vectors).astype(np.float32)
