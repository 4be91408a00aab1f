"""What happens to vectors after the model: Matryoshka truncation, sparse top-k and wire encodings."""

from __future__ import annotations

import base64

import numpy as np


def truncate_dimensions(vectors: np.ndarray, dimensions: int | None, renormalize: bool) -> np.ndarray:
    """Keep the first `dimensions` features; re-normalize so truncated unit vectors stay unit vectors."""
    if dimensions is None or dimensions >= vectors.shape[-1]:
        return vectors
    kept = vectors[..., :dimensions]
    if not renormalize:
        return kept
    norms = np.linalg.norm(kept, axis=-1, keepdims=True)
    return kept / np.maximum(norms, 1e-12)


def to_base64(vector: np.ndarray) -> str:
    """Little-endian float32 bytes, base64-encoded: what OpenAI's `encoding_format=base64` returns."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


def keep_largest(entries: np.ndarray, count: int | None) -> np.ndarray:
    """A sparse output's (2, active) [indices; weights] cut to its `count` largest weights (by magnitude,
    as sentence-transformers' `max_active_dims`), indices still ascending."""
    if count is None or entries.shape[1] <= count:
        return entries
    kept = np.sort(np.argpartition(-np.abs(entries[1]), count - 1)[:count])
    return entries[:, kept]
