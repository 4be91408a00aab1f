"""Which backend and dtype can run on which device, checked before anything is served.

The backends each kind runs on are its `KindSpec.backends` (`models.kinds.check_kind`): text embedders on
torch, ONNX Runtime and CTranslate2; rerankers and classifiers on torch and ONNX Runtime (causal-LM rerankers
on torch only, `models.inference.text_scorer`); sparse (SPLADE), CLIP, CLAP and ColPali models on torch only. Dtypes per
backend are checked when the configuration is read (`config.settings.BACKEND_DTYPES`); the device-dependent
ones here.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from config.errors import ConfigError
from config.settings import ModelConfig, get_config

GPU_ONLY = {
    ("torch", "float16"),
    ("ctranslate2", "float16"),
    ("ctranslate2", "int8_float16"),
    ("ctranslate2", "bfloat16"),
}
CPU_ONLY = {("onnx", "int8")}


def check_device(cfg: ModelConfig, device: str) -> None:
    on_gpu = device.startswith("cuda")
    if (cfg.backend, cfg.dtype) in GPU_ONLY and not on_gpu:
        raise ConfigError(
            f"model '{cfg.served_model_name}': dtype '{cfg.dtype}' with backend '{cfg.backend}' needs a CUDA "
            f"device, and it runs on '{device}'"
        )
    if (cfg.backend, cfg.dtype) in CPU_ONLY and on_gpu:
        raise ConfigError(
            f"model '{cfg.served_model_name}': dtype '{cfg.dtype}' with backend '{cfg.backend}' is CPU-only "
            f"(dynamic quantization); use float32 on '{device}'"
        )


def cache_folder(folder: Path, what: str) -> Path:
    """Where a converted form of this checkpoint lives. The resolved folder names the revision (Hub
    snapshots are per commit), so a new revision gets a new entry."""
    root = Path(get_config().cache_dir).expanduser()
    digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.name)[:40]
    return root / what / f"{name}-{digest}"
