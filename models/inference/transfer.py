"""Moving a pass's tensors between host and device without stalling the host.

On a GPU, a pass is queued, not run: kernels are launched and the host goes on. A pageable `.to(device)`
copy and a `.cpu()` at the end each make the host wait for the device, so the next pass could not be
collated until this one had finished, and the device idled while the host worked. Here inputs go through
pinned (page-locked) staging memory with `non_blocking` copies, and outputs come back into pinned memory
the same way, with an event to wait on: the pool launches every pass of a call, then waits once.

On CPU both are plain and synchronous, as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def on_accelerator(device: Any) -> bool:
    return str(device).startswith("cuda")


def to_device(
    tensor: torch.Tensor, device: Any, dtype: torch.dtype | None = None, non_blocking: bool = False
) -> torch.Tensor:
    """A host tensor on `device` (and in `dtype`); with `non_blocking`, on a GPU, copied from pinned memory
    without waiting. torch's caching host allocator reuses the pinned blocks, and keeps each until its copy
    is done. Only for inputs torch itself runs on: ONNX Runtime reads them on a CUDA stream of its own, which
    does not wait for torch's copy."""
    if non_blocking and on_accelerator(device):
        return tensor.pin_memory().to(device, dtype=dtype, non_blocking=True)
    return tensor.to(device, dtype=dtype)


class Ready:
    """Outputs already on the host."""

    def __init__(self, outputs: np.ndarray) -> None:
        self._outputs = outputs

    def wait(self) -> np.ndarray:
        return self._outputs


class HostCopy:
    """A device tensor on its way into pinned host memory; `wait` blocks until it has arrived."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        self._host.copy_(tensor, non_blocking=True)
        self._done = torch.cuda.Event()
        self._done.record()

    def wait(self) -> np.ndarray:
        self._done.synchronize()
        return self._host.numpy()


def to_host(tensor: torch.Tensor) -> Ready | HostCopy:
    """A pass's float32 output, copied back without waiting where it is on a GPU (`.wait()` for it)."""
    if on_accelerator(tensor.device):
        return HostCopy(tensor)
    return Ready(tensor.cpu().numpy())  # MPS: a plain, waiting copy
