"""Vision-language embedders on the torch backend (model-service side): Qwen3-VL-Embedding, one vector per input
(a text, an image, or both), as its sentence-transformers modules compute it: the base model's last hidden state
at the last token (`Pooling(lasttoken)`), L2-normalized (`Normalize`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.base import Kind, ModelInfo, ModelInput
from models.inference.padding import collate
from models.preprocessing.vl_processor import VisionLanguageProcessor

TOKEN_ARRAYS = ("input_ids", "attention_mask", "mm_token_type_ids")


class VisionLanguageEncoder:
    """The `TokenModel` of `vl-embed` checkpoints."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind) -> None:
        from transformers import AutoModel

        self.processor = VisionLanguageProcessor(folder, cfg, kind)
        # sentence-transformers' Transformer module loads the base model: AutoModel (Qwen3VLModel)
        self._model, self._device, self._dtype = load_vision_language(AutoModel, folder, cfg)
        probe = self.forward(self.processor.warmup_rows(cfg.served_model_name)[:1])[0]
        self.info = ModelInfo.of(
            cfg,
            kind,
            modalities=list(self.processor.modalities),
            dimension=int(probe.shape[-1]),
            max_input_tokens=self.processor.max_input_tokens,
            normalized=True,
            device=str(self._device),
            dtype=str(self._dtype).removeprefix("torch."),
        )

    def forward(self, rows: Sequence[ModelInput]) -> list[np.ndarray]:
        import torch

        batch = vl_batch(rows, self.processor.pad_id, self.processor.pad_left, self._device, self._dtype)
        with torch.inference_mode():
            states = self._model(**batch).last_hidden_state
            vectors = _last_tokens(states, batch["attention_mask"], self.processor.pad_left).float()
            vectors = torch.nn.functional.normalize(vectors, dim=-1)
        return list(vectors.cpu().numpy())


def load_vision_language(auto_class: Any, folder: Path, cfg: ModelConfig) -> tuple[Any, Any, Any]:
    """The checkpoint through a transformers auto class, on the configured device and dtype, in eval mode; with
    (device, dtype)."""
    from models.inference.device import pick_device, pick_dtype

    device = pick_device(cfg.device)
    dtype = pick_dtype(cfg.dtype, device)
    try:
        model = auto_class.from_pretrained(
            str(folder), dtype=dtype, trust_remote_code=cfg.trust_remote_code, local_files_only=True
        )
    except Exception as exc:
        raise ModelLoadError(f"cannot load '{cfg.model_id}' from {folder}: {exc}") from exc
    return model.to(device).eval(), device, dtype


def vl_batch(rows: Sequence[ModelInput], pad_id: int, pad_left: bool, device: Any, dtype: Any) -> dict[str, Any]:
    """One pass's inputs over texts and images together: the rows' token sequences padded on `pad_left`'s side,
    their images' patches and grids concatenated in row order (the order of their placeholders in the batch)."""
    import torch

    batch = collate(
        [{key: row.arrays[key] for key in TOKEN_ARRAYS} for row in rows], pad_id, pad_left, device, non_blocking=True
    )
    with_images = [row.arrays for row in rows if "pixel_values" in row.arrays]
    if with_images:
        pixels = np.concatenate([arrays["pixel_values"] for arrays in with_images])
        grids = np.concatenate([arrays["image_grid_thw"] for arrays in with_images])
        batch["pixel_values"] = torch.from_numpy(pixels).to(device, dtype)
        batch["image_grid_thw"] = torch.from_numpy(grids).to(device)
    return batch


def _last_tokens(states: Any, mask: Any, pad_left: bool) -> Any:
    """Each row's state at its last real token (sentence-transformers' `lasttoken` pooling)."""
    import torch

    if pad_left:
        return states[:, -1]
    last = mask.sum(dim=1) - 1
    return states[torch.arange(states.shape[0], device=states.device), last]
