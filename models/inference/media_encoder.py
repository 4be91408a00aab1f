"""Multimodal checkpoints on the torch backend (model-service side): the CLIP family and CLAP (two towers, one
vector per input, L2-normalized as the family compares them) and the page retrievers ColPali, ColQwen2 and
ColModernVBERT (one vector per token or patch: late interaction)."""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.base import Kind, ModelInfo, ModelInput
from models.inference.padding import collate
from models.kinds import spec
from models.preprocessing.media_processor import MediaProcessor

# The late-interaction page retrievers transformers has a class for, by `model_type`.
RETRIEVAL_CLASSES = {
    "colpali": "ColPaliForRetrieval",
    "colqwen2": "ColQwen2ForRetrieval",
    "colmodernvbert": "ColModernVBertForRetrieval",
}


class MediaEncoder:
    """The `TokenModel` of `clip`, `clap` and `colpali` checkpoints."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind) -> None:
        from models.inference.device import pick_device, pick_dtype

        self.processor = MediaProcessor(folder, cfg, kind)
        device = pick_device(cfg.device)
        dtype = pick_dtype(cfg.dtype, device)
        self._model = _load(folder, cfg, kind, dtype).to(device).eval()
        self._device = device
        self._dtype = dtype
        self._multi_vector = spec(kind).output == "multi-vector"
        probe = self.forward(self.processor.rows(cfg.served_model_name, "text", ["warm-up"]))[0]
        self.info = ModelInfo.of(
            cfg,
            kind,
            modalities=list(self.processor.modalities),
            dimension=int(probe.shape[-1]),
            max_input_tokens=self.processor.max_input_tokens,
            normalized=True,
            device=str(device),
            dtype=str(dtype).removeprefix("torch."),
        )

    def forward(self, rows: Sequence[ModelInput]) -> list[np.ndarray]:
        by_modality: dict[str, list[int]] = defaultdict(list)
        for index, row in enumerate(rows):
            by_modality[row.modality].append(index)
        outputs: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(rows)
        for modality, indices in by_modality.items():
            batch = collate(
                [rows[i].arrays for i in indices],
                self.processor.pad_id,
                self.processor.pad_left,
                self._device,
                self._dtype,
                non_blocking=True,
            )  # torch models only
            for index, output in zip(indices, self._run(modality, batch)):
                outputs[index] = output
        return outputs

    def _run(self, modality: str, batch: dict[str, Any]) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            if self._multi_vector:
                embeddings = self._model(**batch).embeddings.float()
                mask = batch["attention_mask"].bool()
                return [e[m].cpu().numpy() for e, m in zip(embeddings, mask)]
            method = getattr(self._model, f"get_{modality}_features")
            accepted = inspect.signature(method).parameters
            output = method(**{k: v for k, v in batch.items() if k in accepted})
            # transformers 5 returns the projected embedding as the output's `pooler_output`, 4.x the tensor
            features = (output if isinstance(output, torch.Tensor) else output.pooler_output).float()
            features = torch.nn.functional.normalize(features, dim=-1)
        return list(features.cpu().numpy())


def _load(folder: Path, cfg: ModelConfig, kind: Kind, dtype: Any) -> Any:
    """A late-interaction retrieval model (multi-vector), or a dual encoder with one tower per modality."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(folder), trust_remote_code=cfg.trust_remote_code)
    multi_vector = spec(kind).output == "multi-vector"
    if multi_vector:
        name = RETRIEVAL_CLASSES.get(config.model_type)
        if name is None:
            raise ModelLoadError(
                f"'{cfg.model_id}' ({config.model_type}) is not a page retriever transformers runs: "
                f"{sorted(RETRIEVAL_CLASSES)}"
            )
        model_class = getattr(transformers, name)
    else:
        model_class = transformers.AutoModel
    try:
        model = model_class.from_pretrained(
            str(folder), dtype=dtype, trust_remote_code=cfg.trust_remote_code, local_files_only=True
        )
    except Exception as exc:
        raise ModelLoadError(f"cannot load '{cfg.model_id}' from {folder}: {exc}") from exc
    needed = [] if multi_vector else [f"get_{modality}_features" for modality in spec(kind).modalities]
    missing = [m for m in needed if not hasattr(model, m)]
    if missing:
        raise ModelLoadError(f"'{cfg.model_id}' has no {missing}; it is not a {kind} dual encoder")
    return model
