"""Where a model runs and in which precision, and loading a sentence-transformers model there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from config.errors import ConfigError, ModelLoadError
from config.settings import ModelConfig

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def set_cpu_threads(threads: int) -> None:
    """Intra-op threads for torch on the calling thread, and so for ONNX Runtime and CTranslate2, which take
    torch's count. torch keeps the count per thread but sets each thread's on its first parallel op from a
    process-wide value, the last one set anywhere: without settling that first, a lane thread set to 1 ran
    its passes on 2 once another thread had set 2 meanwhile, the cores were oversubscribed, and every pass
    in the process ran at half speed from then on."""
    torch.get_num_threads()  # this thread's first-use initialisation, done now so it cannot undo the count
    torch.set_num_threads(threads)


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int8_float16": 2}


def free_memory(device: str) -> int | None:
    """Bytes free on a CUDA device (after the models loaded there), or None for other devices."""
    if not device.startswith("cuda"):
        return None
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


def pick_device(requested: str) -> str:
    """`auto` takes the first GPU when there is one (CUDA, else Apple's MPS); an explicit one must exist."""
    if requested == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    if requested == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("device 'mps' was requested but this machine has no MPS device")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device '{requested}' was requested but no CUDA device is available")
    return requested


def pick_dtype(requested: str, device: str) -> torch.dtype:
    """`auto`: half precision on GPUs (bf16 where supported), float32 on CPUs."""
    if requested != "auto":
        return DTYPES[requested]
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def load_on_device(model_class: Callable[..., Any], folder: Path, cfg: ModelConfig, task: str) -> tuple[Any, str, str]:
    """A sentence-transformers `SentenceTransformer` or `CrossEncoder` from a local folder on the configured
    device, backend and dtype, in eval mode, with (device, dtype name). Nothing is fetched: the folder was
    resolved beforehand. CTranslate2 loads the torch model here; the caller swaps its Transformer module."""
    from models.inference.backends import check_device

    try:
        device = pick_device(cfg.device)
    except ConfigError as exc:
        raise ConfigError(f"model '{cfg.served_model_name}': {exc.message}") from None
    check_device(cfg, device)
    if cfg.backend == "torch":
        torch_dtype = pick_dtype(cfg.dtype, device)
        kwargs: dict[str, Any] = {"model_kwargs": {"dtype": torch_dtype}}
        dtype = str(torch_dtype).removeprefix("torch.")
    elif cfg.backend == "onnx":  # torch loads the modules; its transformer then runs on ONNX Runtime
        kwargs = {"model_kwargs": {"dtype": torch.float32}}
        dtype = "int8" if cfg.dtype == "int8" else "float32"
    elif cfg.backend == "ctranslate2":
        kwargs = {}
        dtype = ctranslate2_compute_type(cfg.dtype, device)
    else:  # `auto` is decided before a model class is built (models.inference.auto_backend.load_model)
        raise ValueError(f"a model class was given backend '{cfg.backend}', which names no backend")
    try:
        model = model_class(
            str(folder), device=device, trust_remote_code=cfg.trust_remote_code, local_files_only=True, **kwargs
        )
    except Exception as exc:
        raise ModelLoadError(f"cannot load '{cfg.model_id}' from {folder} ({cfg.backend}): {exc}") from exc
    if cfg.backend == "onnx":
        from models.inference.onnx_runtime import attach_session

        attach_session(model[0], folder, task, cfg.dtype == "int8", device, torch.get_num_threads())
    return model.eval(), device, dtype


def ctranslate2_compute_type(requested: str, device: str) -> str:
    """`auto`: float16 on GPUs (bfloat16 where supported), float32 on CPUs; otherwise as configured."""
    if requested != "auto":
        return requested
    return str(pick_dtype("auto", device)).removeprefix("torch.")
