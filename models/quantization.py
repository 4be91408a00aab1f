"""Quantized embeddings (int8, uint8, binary, ubinary) with ranges fixed per model.

The codes are sentence-transformers' `quantize_embeddings`, bit for bit (the tests compare them). It is
written out here because the gateway, which quantizes, never imports torch, and sentence-transformers does.
int8/uint8 need per-feature [min, max] ranges. Computed from the request itself (sentence-transformers'
fallback, infinity's only mode) the same text would get other codes in another batch; here they are fixed per
model: configured, or calibrated once at start from `calibration_texts.txt` and rounded outward to a grid, so
that float noise in the last digits between restarts does not move them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np

from models.errors import ConfigError, InvalidRequest
from models.postprocess import truncate_dimensions

Precision = Literal["int8", "uint8", "binary", "ubinary"]
PRECISIONS: tuple[Precision, ...] = ("int8", "uint8", "binary", "ubinary")
RANGE_GRID = 4096  # ranges are multiples of 1/4096: exact in float32 and in JSON
DERIVED_KEPT = 64  # widths whose ranges are kept: `dimensions` is free, each entry up to 2 x features floats
CALIBRATION_TEXTS = [line for line in (Path(__file__).with_name("calibration_texts.txt")).read_text(
    encoding="utf-8").splitlines() if line.strip()]


def quantize(vectors: np.ndarray, precision: Precision, ranges: np.ndarray | None = None) -> np.ndarray:
    """(inputs, features) floats as codes: int8/uint8 by per-feature `ranges` (2, features) [mins; maxs], 255
    steps; binary/ubinary as packed sign bits (binary offset by 128 into int8)."""
    if precision in ("binary", "ubinary"):
        packed = np.packbits(vectors > 0, axis=-1).reshape(vectors.shape[0], -1)
        return (packed - 128).astype(np.int8) if precision == "binary" else packed
    assert ranges is not None, "int8 and uint8 need ranges"
    starts = ranges[0, :]
    steps = (ranges[1, :] - ranges[0, :]) / 255
    steps = np.where(steps == 0, 1, steps)
    codes = np.clip(np.floor((vectors - starts) / steps), 0, 255)
    return codes.astype(np.uint8) if precision == "uint8" else (codes - 128).astype(np.int8)


def ranges_of(embeddings: np.ndarray) -> np.ndarray:
    """Per-feature [min; max] of calibration embeddings, rounded outward to the grid."""
    mins = np.floor(embeddings.min(axis=0).astype(np.float64) * RANGE_GRID) / RANGE_GRID
    maxs = np.ceil(embeddings.max(axis=0).astype(np.float64) * RANGE_GRID) / RANGE_GRID
    return np.vstack((mins, maxs)).astype(np.float32)


class QuantizationRanges:
    """One model's int8/uint8 ranges, per number of features kept (`dimensions` truncates and re-normalizes
    before quantizing, which changes the ranges): configured ones, or derived from its calibration vectors."""

    def __init__(self, calibration: np.ndarray | None = None,
                 configured: dict[int, np.ndarray] | None = None) -> None:
        assert (calibration is None) != (configured is None)
        self._calibration = calibration
        self._configured = configured
        self._derived: dict[tuple[int, bool], np.ndarray] = {}

    @property
    def source(self) -> str:
        return "configured" if self._configured is not None else "calibrated"

    def for_features(self, features: int, renormalized: bool) -> np.ndarray:
        if self._configured is not None:
            if features not in self._configured:
                raise InvalidRequest(f"int8/uint8 ranges are configured for {sorted(self._configured)} features, "
                                     f"not {features}; add them to quantization_ranges", param="dimensions")
            return self._configured[features]
        key = (features, renormalized)
        if key not in self._derived:
            if len(self._derived) >= DERIVED_KEPT:
                self._derived.clear()
            assert self._calibration is not None
            self._derived[key] = ranges_of(truncate_dimensions(self._calibration, features, renormalized))
        return self._derived[key]

    def report(self, features: int, renormalized: bool) -> dict:
        """What GET /v1/models says: the source and the full-width ranges, in `quantization_ranges`' format."""
        ranges = self._configured if self._configured is not None else {
            features: self.for_features(features, renormalized)}
        return {"source": self.source, "calibration_texts": None if self._configured else len(CALIBRATION_TEXTS),
                "ranges": {str(n): r.tolist() for n, r in ranges.items()}}


def read_configured_ranges(path: str, dimension: int) -> dict[int, np.ndarray]:
    """A `quantization_ranges` file: {"<features>": [[mins...], [maxs...]], ...}, as /v1/models reports them."""
    try:
        raw = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        ranges = {int(features): np.asarray(pair, dtype=np.float32) for features, pair in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"cannot read quantization_ranges '{path}': {exc}") from exc
    for features, pair in ranges.items():
        if pair.shape != (2, features) or features > dimension or not (pair[0] <= pair[1]).all():
            raise ConfigError(f"quantization_ranges '{path}': entry '{features}' must be [[{features} mins], "
                              f"[{features} maxs]] with mins <= maxs, for at most {dimension} features")
    return ranges
