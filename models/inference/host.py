"""What a model service knows of its host without importing torch: each thread's intra-op thread count, and
whether a model's device is the CPU.

A model service whose models all run on ONNX Runtime in numpy (`KindSpec.torch_free_loader`: `onnx_encoder`,
`onnx_scorer`, `onnx_colbert`) never loads torch, so the thread count its pool and lanes set is recorded here and
handed to torch only once torch is in the process: at once if it is already, else when a model that needs it is
loaded (`torch_threads`).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

_local = threading.local()
# The device files torch finds a GPU through: NVIDIA's (WSL's /dev/dxg), and ROCm's kernel driver. Without any of
# them (and off macOS, where torch has MPS) `device: auto` means the CPU, which torch would say too.
ACCELERATOR_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


def set_cpu_threads(threads: int) -> None:
    """This thread's intra-op threads, for ONNX Runtime sessions and, when torch is loaded, torch."""
    _local.threads = threads
    if sys.modules.get("torch") is not None:
        torch_threads()


def cpu_threads() -> int:
    """This thread's intra-op threads as set, else every core this process may use (torch's own default)."""
    threads = getattr(_local, "threads", None)
    return threads if threads is not None else len(os.sched_getaffinity(0))


def torch_threads() -> None:
    """torch on this thread takes the count set here (if any): called before a torch-backed model loads."""
    threads = getattr(_local, "threads", None)
    if threads is not None:
        from models.inference.device import set_cpu_threads as set_torch_threads  # imports torch

        set_torch_threads(threads)


def on_cpu_without_torch(requested: str) -> bool:
    """Whether a model configured for `requested` runs on the CPU, known without asking torch (False: ask it)."""
    if requested == "cpu":
        return True
    no_accelerator = sys.platform != "darwin" and not any(Path(f).exists() for f in ACCELERATOR_FILES)
    return requested == "auto" and no_accelerator
