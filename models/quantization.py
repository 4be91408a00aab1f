"""Quantized embeddings (int8, uint8, binary, ubinary) with parameters fixed per model.

int8/uint8 come in two schemes, chosen per model (`quantization`):

- `symmetric` (the default): one scale `s` for every feature, codes = round(x / s * 127) clipped to [-127, 127];
  uint8 is the same codes + 128. A code is the float times a constant, so code · code (and cosine, and L2 on
  uint8) ranks as the floats do: the codes can be stored and searched as they are, as vector databases do
  with Cohere's int8 embeddings.
- `per_dimension`: sentence-transformers' `quantize_embeddings`, bit for bit (the tests compare them): each
  feature's calibrated [min, max] cut into 255 steps. Finer, but each feature has its own offset and step, so
  code · code does not rank as the floats do: rescore with floats, or dequantize (min + (code + 128 + 0.5) x step
  for int8) before searching.

They are written out here because the gateway, which quantizes, never imports torch, and sentence-transformers
does. The parameters are never computed from the request (sentence-transformers' fallback, infinity's only
mode: the same text would get other codes in another batch). They are configured, or calibrated once at start
from `calibration_texts.txt` and rounded outward to a grid, so that float noise in the last digits between
restarts does not move them: the symmetric scale is the largest |value| of the calibration vectors, the
per-dimension ranges each feature's [min, max].
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np

from config.errors import ConfigError, InvalidRequest
from models.postprocess import truncate_dimensions

Precision = Literal["int8", "uint8", "binary", "ubinary"]
PRECISIONS: tuple[Precision, ...] = ("int8", "uint8", "binary", "ubinary")
Scheme = Literal["symmetric", "per_dimension"]
SCHEMES: tuple[Scheme, ...] = ("symmetric", "per_dimension")
SYMMETRIC_LEVELS = 127  # int8 codes -127..127 (no -128: -x gets the codes of x negated); uint8 1..255
RANGE_GRID = 4096  # scales and ranges are multiples of 1/4096: exact in float32 and in JSON
DERIVED_KEPT = 64  # widths whose parameters are kept: `dimensions` is free, each entry up to 2 x features floats
CALIBRATION_TEXTS = [
    line
    for line in (Path(__file__).with_name("calibration_texts.txt")).read_text(encoding="utf-8").splitlines()
    if line.strip()
]

# One width's parameters: the symmetric scheme's scale, or the per-dimension scheme's (2, features) ranges.
Parameters = float | np.ndarray


def quantize(
    vectors: np.ndarray, precision: Precision, *, scale: float | None = None, ranges: np.ndarray | None = None
) -> np.ndarray:
    """(inputs, features) floats as codes. binary/ubinary: packed sign bits (binary offset by 128 into int8).
    int8/uint8: exactly one of `scale` (symmetric scheme) or `ranges` (per-dimension scheme, [mins; maxs])."""
    if precision in ("binary", "ubinary"):
        packed = np.packbits(vectors > 0, axis=-1).reshape(vectors.shape[0], -1)
        return (packed - 128).astype(np.int8) if precision == "binary" else packed
    assert (scale is None) != (ranges is None), "int8 and uint8 need a scale or ranges"
    if scale is not None:
        codes = np.clip(
            np.rint(vectors.astype(np.float64) / scale * SYMMETRIC_LEVELS), -SYMMETRIC_LEVELS, SYMMETRIC_LEVELS
        )
        return (codes + 128).astype(np.uint8) if precision == "uint8" else codes.astype(np.int8)
    assert ranges is not None
    starts = ranges[0, :]
    steps = (ranges[1, :] - ranges[0, :]) / 255
    steps = np.where(steps == 0, 1, steps)
    codes = np.clip(np.floor((vectors - starts) / steps), 0, 255)
    return codes.astype(np.uint8) if precision == "uint8" else (codes - 128).astype(np.int8)


def scale_of(embeddings: np.ndarray) -> float:
    """The largest |value| of calibration embeddings, rounded up to the grid (at least one grid step)."""
    largest = float(np.abs(embeddings).max().astype(np.float64))
    return max(float(np.ceil(largest * RANGE_GRID)), 1.0) / RANGE_GRID


def ranges_of(embeddings: np.ndarray) -> np.ndarray:
    """Per-feature [min; max] of calibration embeddings, rounded outward to the grid."""
    mins = np.floor(embeddings.min(axis=0).astype(np.float64) * RANGE_GRID) / RANGE_GRID
    maxs = np.ceil(embeddings.max(axis=0).astype(np.float64) * RANGE_GRID) / RANGE_GRID
    return np.vstack((mins, maxs)).astype(np.float32)


class Quantizer:
    """One model's int8/uint8 scheme and its parameters, per number of features kept (`dimensions` truncates
    and re-normalizes before quantizing, which changes them): configured ones, or derived from its
    calibration vectors."""

    def __init__(
        self,
        scheme: Scheme = "symmetric",
        calibration: np.ndarray | None = None,
        configured: dict[int, Parameters] | None = None,
    ) -> None:
        assert (calibration is None) != (configured is None) and scheme in SCHEMES
        self.scheme = scheme
        self._calibration = calibration
        self._configured = configured
        self._derived: dict[tuple[int, bool], Parameters] = {}

    @property
    def source(self) -> str:
        return "configured" if self._configured is not None else "calibrated"

    def check_features(self, features: int, param: str = "dimensions") -> None:
        """Configured parameters cover only the numbers of features they name; `param` is the wire field that
        asked for `features` (`gateway.validation` checks before any work, naming the client's own field)."""
        if self._configured is not None and features not in self._configured:
            raise InvalidRequest(
                f"int8/uint8 parameters are configured for {sorted(self._configured)} features, "
                f"not {features}; add them to quantization_ranges",
                param=param,
            )

    def parameters(self, features: int, renormalized: bool) -> Parameters:
        """The scale (symmetric) or the ranges (per_dimension) for vectors of `features` features."""
        if self._configured is not None:
            self.check_features(features)
            return self._configured[features]
        key = (features, renormalized)
        if key not in self._derived:
            if len(self._derived) >= DERIVED_KEPT:
                self._derived.clear()
            assert self._calibration is not None
            kept = truncate_dimensions(self._calibration, features, renormalized)
            self._derived[key] = scale_of(kept) if self.scheme == "symmetric" else ranges_of(kept)
        return self._derived[key]

    def codes(self, vectors: np.ndarray, precision: Precision, renormalized: bool) -> np.ndarray:
        """int8/uint8 codes of (inputs, features) vectors by this model's scheme."""
        parameters = self.parameters(vectors.shape[1], renormalized)
        if self.scheme == "symmetric":
            return quantize(vectors, precision, scale=float(parameters))
        return quantize(vectors, precision, ranges=np.asarray(parameters))

    def report(self, features: int, renormalized: bool) -> dict:
        """What GET /v1/models says: the scheme, the source, and the full-width parameters in
        `quantization_ranges`' format (`scales` for the symmetric scheme, `ranges` for the per-dimension one)."""
        parameters = (
            self._configured if self._configured is not None else {features: self.parameters(features, renormalized)}
        )
        key = "scales" if self.scheme == "symmetric" else "ranges"
        return {
            "scheme": self.scheme,
            "source": self.source,
            "calibration_texts": None if self._configured else len(CALIBRATION_TEXTS),
            key: {str(n): p if self.scheme == "symmetric" else np.asarray(p).tolist() for n, p in parameters.items()},
        }


def read_configured_ranges(path: str, dimension: int, scheme: Scheme = "per_dimension") -> dict[int, Parameters]:
    """A `quantization_ranges` file, as /v1/models reports them: per number of features, the symmetric scheme's
    scale, {"<features>": <scale>, ...}, or the per-dimension scheme's {"<features>": [[mins...], [maxs...]]}."""
    try:
        raw = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        entries = {int(features): value for features, value in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"cannot read quantization_ranges '{path}': {exc}") from exc
    if scheme == "symmetric":
        for features, value in entries.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 < value < float("inf")
                or not 0 < features <= dimension
            ):
                raise ConfigError(
                    f"quantization_ranges '{path}': entry '{features}' must be one positive scale for "
                    f"at most {dimension} features, with `quantization: symmetric`; [[mins], [maxs]] "
                    "pairs are for `quantization: per_dimension`"
                )
        return {features: float(np.float32(value)) for features, value in entries.items()}
    try:
        ranges = {features: np.asarray(pair, dtype=np.float32) for features, pair in entries.items()}
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"cannot read quantization_ranges '{path}': {exc}") from exc
    for features, pair in ranges.items():
        if pair.shape != (2, features) or features > dimension or not (pair[0] <= pair[1]).all():
            raise ConfigError(
                f"quantization_ranges '{path}': entry '{features}' must be [[{features} mins], "
                f"[{features} maxs]] with mins <= maxs, for at most {dimension} features, with "
                "`quantization: per_dimension`"
            )
    return dict[int, Parameters](ranges)
