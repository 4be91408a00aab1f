"""Token ids -> sentence embeddings, through the checkpoint's own sentence-transformers modules.

A sentence-transformers folder runs as its `modules.json` declares (Transformer -> Pooling -> Dense ->
Normalize); a plain transformers encoder gets Transformer -> Pooling (mean unless configured) -> Normalize.
The closing Normalize is applied per row, so a request may ask for the raw pooled vector (`normalize:
false`), and a pooling with `include_prompt: false` leaves out each row's own prompt tokens (rows of one
batch carry different prompts, where sentence-transformers assumes one per batch).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.adapters import find_tasks
from models.base import ModelInfo, PendingOutputs, TokenizedText
from models.inference.padding import pad_rows
from models.kinds import Kind
from models.preprocessing.text_settings import TextSettings, is_sentence_transformers_folder, read_text_settings

logger = logging.getLogger(__name__)


class TextEncoder:
    """The `TokenModel` of text embedders on the torch backend."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind = "embed") -> None:
        self._model, device, dtype = _load_sentence_transformer(folder, cfg)
        self._tokenizer = self._model.tokenizer
        self._adapters = _task_adapters(self._model, folder)
        self._device = device
        normalized = _ends_in_normalize(self._model)
        if normalized:
            del self._model[len(self._model) - 1]  # applied per row in `forward`
        self._excludes_prompt = any(getattr(m, "include_prompt", True) is False for m in self._model)
        self.settings: TextSettings = read_text_settings(folder, cfg, self._tokenizer.model_max_length)
        self._model.max_seq_length = self.settings.max_seq_length
        self.info = ModelInfo.of(
            cfg,
            kind,
            dimension=int(self._model.get_embedding_dimension()),
            max_input_tokens=self.settings.max_seq_length,
            normalized=normalized,
            device=device,
            dtype=dtype,
            tasks=self._adapters.tasks if self._adapters else [],
        )

    def forward(self, rows: Sequence[TokenizedText]) -> np.ndarray | Sequence[np.ndarray]:
        return self.launch(rows).wait()

    def launch(self, rows: Sequence[TokenizedText]) -> PendingOutputs:
        """The pass, each row through its task's adapter (`models.inference.task_adapters`)."""
        if self._adapters is None:
            return self._launch(rows)
        tasks = {row.task for row in rows}
        if len(tasks) == 1:  # the pool's passes are of one task: queued as any other
            with self._adapters.under(tasks.pop()):
                return self._launch(rows)
        return Ready(self._adapters.run_by_task(rows, _task_of, lambda group: list(self._launch(group).wait())))

    def _launch(self, rows: Sequence[TokenizedText]) -> PendingOutputs:
        import torch

        from models.inference.transfer import to_host

        staged = pad_rows(rows, self._tokenizer, self._device, non_blocking=self.info.backend == "torch")
        features = {**staged, "modality": "text"}
        left_padded = self._tokenizer.padding_side == "left"
        spanned = [row.spans is not None for row in rows]
        with torch.inference_mode():
            if not (self._excludes_prompt or any(spanned)):
                return to_host(self._normalized(self._model(features)["sentence_embedding"], rows))
            features = self._model[0](features)  # the token states
            if not any(spanned):
                return to_host(self._normalized(self._pooled(features, rows, left_padded), rows))
            sums = _span_sums(features["token_embeddings"], rows, left_padded)
            if all(spanned):
                return SpannedOutputs(to_host(sums), rows, pooled=False)
            vectors = self._normalized(self._pooled(features, rows, left_padded), rows)
            return SpannedOutputs(to_host(torch.cat([vectors, sums])), rows, pooled=True)

    def _pooled(self, features: dict[str, Any], rows: Sequence[TokenizedText], left_padded: bool) -> Any:
        """The modules after the transformer (pooling, dense layers) over its token states."""
        if self._excludes_prompt:
            features["attention_mask"] = _without_prompts(features["attention_mask"], rows, left_padded)
        for module in list(self._model)[1:]:
            features = module(features)
        return features["sentence_embedding"]

    def _normalized(self, vectors: Any, rows: Sequence[TokenizedText]) -> Any:
        return _normalize_rows(vectors, rows, self.info.normalized).float()


class Ready:
    """Outputs already on the host, one per row."""

    def __init__(self, outputs: list[np.ndarray]) -> None:
        self._outputs = outputs

    def wait(self) -> list[np.ndarray]:
        return self._outputs


def _task_of(row: TokenizedText) -> str | None:
    return row.task


def _task_adapters(model: Any, folder: Path) -> Any:  # TaskAdapters | None
    """The folder's task adapters, injected into the model's transformer (torch only: `models.adapters`)."""
    adapters = find_tasks(folder)
    if not adapters:
        return None
    from models.inference.task_adapters import TaskAdapters

    return TaskAdapters(model[0].auto_model, adapters)


class SpannedOutputs:
    """A pass's outputs when some rows ask for span sums (late chunking), in one host copy: every row's pooled
    vector first (when any row wants one), then each spanned row's sums; `wait` gives each row its own."""

    def __init__(self, pending: PendingOutputs, rows: Sequence[TokenizedText], pooled: bool) -> None:
        self._pending = pending
        self._rows = rows
        self._pooled = pooled

    def wait(self) -> list[np.ndarray]:
        host = np.asarray(self._pending.wait())
        outputs, at = [], len(self._rows) if self._pooled else 0
        for index, row in enumerate(self._rows):
            if row.spans is None:
                outputs.append(host[index])
            else:
                outputs.append(host[at : at + len(row.spans)])
                at += len(row.spans)
        return outputs


def _span_sums(states: Any, rows: Sequence[TokenizedText], left_padded: bool) -> Any:
    """Each spanned row's sums of its final token states over its spans, stacked in row order, float32."""
    import torch

    width = states.shape[1]
    sums = []
    for index, row in enumerate(rows):
        offset = width - row.length if left_padded else 0
        for start, stop in row.spans or ():
            sums.append(states[index, offset + start : offset + stop].float().sum(dim=0))
    return torch.stack(sums)


def _without_prompts(attention_mask: Any, rows: Sequence[TokenizedText], left_padded: bool) -> Any:
    """The mask with each row's prompt tokens cleared, for pooling only (attention has run by now)."""
    mask = attention_mask.clone()
    width = mask.shape[1]
    for index, row in enumerate(rows):
        start = width - row.length if left_padded else 0
        mask[index, start : start + row.prompt_length] = 0
    return mask


def _normalize_rows(embeddings: Any, rows: Sequence[TokenizedText], by_default: bool) -> Any:
    """Unit length for the rows that ask for it (None: the model's own behaviour), as Normalize computes it."""
    import torch

    wanted = [by_default if row.normalize is None else row.normalize for row in rows]
    if not any(wanted):
        return embeddings
    normalized = torch.nn.functional.normalize(embeddings, p=2, dim=1)
    if all(wanted):
        return normalized
    return torch.where(torch.tensor(wanted, device=embeddings.device)[:, None], normalized, embeddings)


def _load_sentence_transformer(folder: Path, cfg: ModelConfig) -> tuple[Any, str, str]:  # SentenceTransformer
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    from models.inference.device import load_on_device

    declared = is_sentence_transformers_folder(folder)
    model, device, dtype = load_on_device(SentenceTransformer, folder, cfg, "feature-extraction")
    if cfg.backend == "ctranslate2":
        from models.inference.ctranslate2_encoder import CTranslate2Transformer

        model[0] = CTranslate2Transformer(folder, model.tokenizer, device, dtype)

    if cfg.pooling is not None:
        at = next((i for i, m in enumerate(model) if isinstance(m, Pooling)), None)
        if at is None:
            raise ModelLoadError(f"'{cfg.model_id}' has no pooling module to set to '{cfg.pooling}'")
        old = model[at]
        model[at] = Pooling(old.embedding_dimension, pooling_mode=cfg.pooling, include_prompt=old.include_prompt)

    # Plain transformers checkpoints declare nothing; OpenAI-style clients expect unit vectors.
    normalize = cfg.normalize if cfg.normalize is not None else (True if not declared else None)
    if normalize is True and not _has_normalize(model):
        model.append(Normalize())
    elif normalize is False:
        for at in reversed([i for i, m in enumerate(model) if isinstance(m, Normalize)]):
            del model[at]
    return model, device, dtype


def _has_normalize(model: Iterable[Any]) -> bool:
    from sentence_transformers.sentence_transformer.modules import Normalize

    return any(isinstance(m, Normalize) for m in model)


def _ends_in_normalize(model: Any) -> bool:
    from sentence_transformers.sentence_transformer.modules import Normalize

    return isinstance(model[len(model) - 1], Normalize)
