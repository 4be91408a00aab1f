"""Several arrays in one float32 array, and back: a row's outputs travel between services as one array each.

Each array is written as its number of axes, its shape, then its values; shapes and vocabulary indices stay
exact in float32 (below 2**24).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pack_arrays(arrays: Sequence[np.ndarray]) -> np.ndarray:
    parts = []
    for array in arrays:
        parts += [np.array([array.ndim, *array.shape], dtype=np.float32), np.asarray(array, np.float32).ravel()]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def unpack_arrays(packed: np.ndarray) -> list[np.ndarray]:
    arrays, at = [], 0
    while at < len(packed):
        ndim = int(packed[at])
        shape = tuple(int(n) for n in packed[at + 1 : at + 1 + ndim])
        at += 1 + ndim
        size = int(np.prod(shape))
        arrays.append(packed[at : at + size].reshape(shape))
        at += size
    return arrays
