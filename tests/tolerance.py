"""How model outputs are compared: tolerances that fit a value's magnitude and how it was computed.

float32 results from a batch of another shape, or from another processor (Intel or AMD kernels), differ in
their last digits: about 1e-6 of the largest value that went into them. An absolute tolerance of 1e-5 on a
logit of 4 or an unnormalized vector of norm 10 passes or fails with the processor, so:
- scores, logits and other values not bounded by 1: relative to the largest magnitude compared
  (`assert_close`);
- vectors: cosine per row, and for unnormalized ones the norm relative to itself (`assert_same_vectors`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

# float32 rounding that a different batch shape or kernel reorders, with room for the sums of a forward.
FLOAT32_RTOL = 1e-4
FLOAT32_MIN_COSINE = 1 - 1e-5


def assert_close(got: ArrayLike, expected: ArrayLike, rtol: float = FLOAT32_RTOL, err_msg: str = "") -> None:
    """Elementwise, within `rtol` of each value plus `rtol` of the largest magnitude (for values near 0)."""
    expected = np.asarray(expected, dtype=np.float64)
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    np.testing.assert_allclose(
        np.asarray(got, dtype=np.float64), expected, rtol=rtol, atol=rtol * max(scale, 1e-30), err_msg=err_msg
    )


def cosines(got: ArrayLike, expected: ArrayLike) -> np.ndarray:
    """Cosine similarity of each row of `got` with the same row of `expected`."""
    a = np.atleast_2d(np.asarray(got, dtype=np.float64))
    b = np.atleast_2d(np.asarray(expected, dtype=np.float64))
    assert a.shape == b.shape, f"shapes differ: {a.shape} against {b.shape}"
    return (a * b).sum(axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def assert_same_vectors(
    got: ArrayLike,
    expected: ArrayLike,
    min_cosine: float = FLOAT32_MIN_COSINE,
    norm_rtol: float = FLOAT32_RTOL,
    err_msg: str = "",
) -> None:
    """Each row points the same way (cosine at least `min_cosine`) and has the same length (within `norm_rtol`)."""
    similarity = cosines(got, expected)
    assert (similarity >= min_cosine).all(), f"{err_msg} cosines {similarity.round(7).tolist()} < {min_cosine}"
    norms = np.linalg.norm(np.atleast_2d(np.asarray(expected, dtype=np.float64)), axis=-1)
    np.testing.assert_allclose(
        np.linalg.norm(np.atleast_2d(np.asarray(got, dtype=np.float64)), axis=-1),
        norms,
        rtol=norm_rtol,
        err_msg=err_msg,
    )
