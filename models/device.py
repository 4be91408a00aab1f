"""Where a model runs and in which precision."""

from __future__ import annotations

import torch

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
