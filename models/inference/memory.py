"""Giving freed memory back to the system after forward passes of changing shapes.

Each pass over a new (batch, length) shape allocates and frees activations and oneDNN scratch buffers of
a new size. glibc keeps the freed chunks in its arenas rather than returning them, so a model server's
RSS climbed by about 1 GiB in ten minutes of mixed text (all-MiniLM-L6-v2 on CPU: +887 MiB over 450
passes of random shapes in-process; +16 MiB with a trim after each pass, at the same speed).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import time
from collections.abc import Callable

TRIM_EVERY_S = 1.0  # a trim costs a few ms; at most once a second keeps that under 1 % of a busy core


def _libc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


class HeapTrimmer:
    """Call `after_work()` after each batch (on any one thread): it trims the heap at most once a second."""

    def __init__(self, every_s: float = TRIM_EVERY_S) -> None:
        self._trim = _libc_malloc_trim()
        self._every_s = every_s
        self._last = 0.0

    def after_work(self) -> None:
        now = time.monotonic()
        if self._trim is not None and now - self._last >= self._every_s:
            self._trim(0)
            self._last = now


def release_memory() -> None:
    """What dropped models held, back to the system: their objects collected (a model's modules refer to each
    other, so reference counting alone frees none), torch's CUDA cache emptied where CUDA was used (else the
    freed blocks stay reserved by this process), and glibc's heap trimmed."""
    gc.collect()
    torch = sys.modules.get("torch")  # never imported for it: an ONNX-only service has no torch
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    trim = _libc_malloc_trim()
    if trim is not None:
        trim(0)
