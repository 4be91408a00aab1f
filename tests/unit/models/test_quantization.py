"""Quantized codes without a server (models/quantization.py): the symmetric default, and the per-dimension option
against sentence-transformers' `quantize_embeddings`; fixed scales and ranges, and the calibration texts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from config.errors import ConfigError, InvalidRequest
from config.settings import ModelConfig
from models.postprocess import truncate_dimensions
from models.quantization import (
    CALIBRATION_TEXTS,
    RANGE_GRID,
    Quantizer,
    quantize,
    ranges_of,
    read_configured_ranges,
    scale_of,
)
from tests.conftest import MINILM


def _reference(vectors: np.ndarray, precision: str, ranges: np.ndarray | None = None) -> np.ndarray:
    from sentence_transformers.util.quantization import quantize_embeddings

    return quantize_embeddings(vectors, precision, ranges=ranges)


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    rng = np.random.default_rng(0)
    raw = rng.normal(size=(300, 40)).astype(np.float32)
    raw[0, :3] = 0.0  # a zero is not a positive bit
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_per_dimension_codes_equal_sentence_transformers(vectors, precision):
    ranges = ranges_of(vectors[:200])
    got = quantize(vectors, precision, ranges=ranges)
    expected = _reference(vectors, precision, ranges)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    option = Quantizer("per_dimension", calibration=vectors[:200])
    assert np.array_equal(option.codes(vectors, precision, renormalized=True), expected)


@pytest.mark.parametrize("precision", ["binary", "ubinary"])
def test_binary_codes_equal_sentence_transformers(vectors, precision):
    got = quantize(vectors, precision)
    expected = _reference(vectors, precision)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_symmetric_is_the_default_scheme(vectors):
    assert ModelConfig(model_id=MINILM).quantization == "symmetric"
    assert Quantizer(calibration=vectors).scheme == "symmetric"
    assert ModelConfig(model_id=MINILM, quantization="per_dimension").quantization == "per_dimension"
    with pytest.raises(ValueError, match="'symmetric' or 'per_dimension'"):
        ModelConfig(model_id=MINILM, quantization="per_feature")


def test_symmetric_codes_are_the_floats_times_one_constant(vectors):
    scale = scale_of(vectors[:200])
    int8 = quantize(vectors, "int8", scale=scale)
    uint8 = quantize(vectors, "uint8", scale=scale)
    assert int8.dtype == np.int8 and uint8.dtype == np.uint8
    # the spec, written independently: round(x / s * 127), in [-127, 127]; uint8 the same + 128
    assert np.array_equal(int8, np.clip(np.round(vectors.astype(np.float64) / scale * 127), -127, 127))
    assert np.array_equal(uint8.astype(int), int8.astype(int) + 128)
    inside = np.abs(vectors) <= scale
    step = scale / 127
    assert inside[:200].all() and inside.mean() > 0.99
    assert (np.abs(int8 * step - vectors)[inside] <= step / 2 + 1e-7).all()
    assert np.array_equal(quantize(-vectors, "int8", scale=scale), -int8)  # symmetric: no offset
    # what a vector database computes on the codes: dot products (scaled by (127 / s)^2), and uint8 L2 equal to int8's
    dots = int8.astype(np.int64) @ int8.astype(np.int64).T * step**2
    assert np.abs(dots - vectors @ vectors.T).max() < 2 * step
    pairs = (slice(0, 50), slice(50, 100))
    l2_int8 = ((int8[pairs[0]].astype(int) - int8[pairs[1]]) ** 2).sum(axis=1)
    l2_uint8 = ((uint8[pairs[0]].astype(int) - uint8[pairs[1]]) ** 2).sum(axis=1)
    assert np.array_equal(l2_int8, l2_uint8)


def test_values_outside_the_parameters_saturate(vectors):
    ranges = ranges_of(vectors[:10])
    codes = quantize(np.vstack([ranges[0] - 1, ranges[1] + 1]), "uint8", ranges=ranges)
    assert (codes[0] == 0).all() and (codes[1] == 255).all()
    scale = scale_of(vectors[:10])
    far = np.vstack([np.full(40, -2 * scale), np.full(40, 2 * scale)]).astype(np.float32)
    assert (quantize(far, "int8", scale=scale) == [[-127], [127]]).all()
    assert (quantize(far, "uint8", scale=scale) == [[1], [255]]).all()


def test_ranges_are_rounded_outward_to_the_grid(vectors):
    ranges = ranges_of(vectors)
    assert (ranges[0] <= vectors.min(axis=0)).all() and (ranges[1] >= vectors.max(axis=0)).all()
    assert (ranges[1] - vectors.max(axis=0) < 1 / RANGE_GRID).all()
    assert np.array_equal(ranges * RANGE_GRID, np.round(ranges * RANGE_GRID))
    # float noise far below the grid does not move them
    assert np.array_equal(ranges_of(vectors * np.float32(1 + 1e-7)), ranges)


def test_the_scale_is_rounded_up_to_the_grid(vectors):
    scale = scale_of(vectors)
    largest = float(np.abs(vectors).max())
    assert largest <= scale < largest + 1 / RANGE_GRID
    assert scale * RANGE_GRID == round(scale * RANGE_GRID) and np.float32(scale) == scale
    assert scale_of(vectors * np.float32(1 + 1e-7)) == scale
    assert scale_of(np.zeros((2, 4), dtype=np.float32)) == 1 / RANGE_GRID  # never zero


def test_parameters_per_width_come_from_the_truncated_renormalized_calibration(vectors):
    calibrated = Quantizer("per_dimension", calibration=vectors)
    assert np.array_equal(calibrated.parameters(16, True), ranges_of(truncate_dimensions(vectors, 16, True)))
    assert np.array_equal(calibrated.parameters(16, False), ranges_of(vectors[:, :16]))
    assert calibrated.parameters(16, True)[1].max() > calibrated.parameters(16, False)[1].max()
    report = calibrated.report(40, True)
    assert report["scheme"] == "per_dimension" and report["source"] == "calibrated"
    assert report["calibration_texts"] == len(CALIBRATION_TEXTS)
    assert np.array_equal(np.asarray(report["ranges"]["40"], dtype=np.float32), ranges_of(vectors))
    symmetric = Quantizer("symmetric", calibration=vectors)
    assert symmetric.parameters(16, True) == scale_of(truncate_dimensions(vectors, 16, True))
    assert symmetric.parameters(16, False) == scale_of(vectors[:, :16])
    assert symmetric.parameters(16, True) > symmetric.parameters(16, False)
    assert np.array_equal(
        symmetric.codes(vectors[:, :16], "int8", renormalized=False),
        quantize(vectors[:, :16], "int8", scale=scale_of(vectors[:, :16])),
    )
    report = symmetric.report(40, True)
    assert report == {
        "scheme": "symmetric",
        "source": "calibrated",
        "calibration_texts": len(CALIBRATION_TEXTS),
        "scales": {"40": scale_of(vectors)},
    }
    assert json.loads(json.dumps(report)) == report  # the scale survives JSON exactly


@pytest.mark.parametrize("scheme", ["symmetric", "per_dimension"])
def test_configured_parameters_are_read_and_checked(tmp_path: Path, vectors, scheme):
    key = "scales" if scheme == "symmetric" else "ranges"
    calibrated = Quantizer(scheme, calibration=vectors)
    path = tmp_path / "ranges.json"
    path.write_text(json.dumps(calibrated.report(40, True)[key]))
    configured = Quantizer(scheme, configured=read_configured_ranges(str(path), 40, scheme))
    assert configured.source == "configured" and configured.report(40, True)[key] == calibrated.report(40, True)[key]
    for precision in ("int8", "uint8"):
        assert np.array_equal(configured.codes(vectors, precision, True), calibrated.codes(vectors, precision, True))
    with pytest.raises(InvalidRequest, match="configured for \\[40\\] features, not 16"):
        configured.parameters(16, True)
    wrong = {"40": [[0.0] * 39, [1.0] * 39]} if scheme == "per_dimension" else {"40": -1.0}
    path.write_text(json.dumps(wrong))
    with pytest.raises(ConfigError, match="entry '40'"):
        read_configured_ranges(str(path), 40, scheme)
    # the other scheme's file is refused, naming the setting that fits it
    path.write_text(
        json.dumps(
            Quantizer(calibration=vectors).report(40, True)["scales"]
            if scheme == "per_dimension"
            else Quantizer("per_dimension", calibration=vectors).report(40, True)["ranges"]
        )
    )
    with pytest.raises(ConfigError, match="entry '40'.*quantization: per_dimension"):
        read_configured_ranges(str(path), 40, scheme)
    path.write_text("not json")
    with pytest.raises(ConfigError, match="cannot read"):
        read_configured_ranges(str(path), 40, scheme)


def test_calibration_texts_are_many_and_varied():
    assert len(CALIBRATION_TEXTS) >= 90 and len(set(CALIBRATION_TEXTS)) == len(CALIBRATION_TEXTS)
    assert any(len(text) > 200 for text in CALIBRATION_TEXTS) and any(not text.isascii() for text in CALIBRATION_TEXTS)
