"""Where a model runs and in which precision, and loading a sentence-transformers model there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from models.config import ModelConfig
from models.errors import ModelLoadError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def pick_device(requested: str) -> str:
    """`auto` takes the first GPU when there is one; an explicit CUDA device must exist."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device '{requested}' was requested but no CUDA device is available")
    return requested


def pick_dtype(requested: str, device: str) -> torch.dtype:
    """`auto`: half precision on GPUs (bf16 where supported), float32 on CPUs."""
    if requested != "auto":
        return DTYPES[requested]
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def load_on_device(model_class: type, folder: Path, cfg: ModelConfig) -> Any:
    """A sentence-transformers `SentenceTransformer` or `CrossEncoder` from a local folder, on the configured
    device and dtype, in eval mode. Nothing is fetched: the folder was resolved beforehand."""
    device = pick_device(cfg.device)
    try:
        model = model_class(
            str(folder),
            device=device,
            trust_remote_code=cfg.trust_remote_code,
            local_files_only=True,
            model_kwargs={"dtype": pick_dtype(cfg.dtype, device)},
        )
    except Exception as exc:
        raise ModelLoadError(f"cannot load '{cfg.model_id}' from {folder}: {exc}") from exc
    return model.eval()
