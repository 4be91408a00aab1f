"""Warm-up and calibration: a real call through every modality a model serves, and for quantizable models the
int8/uint8 scale (or ranges), configured or calibrated on fixed texts."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from config import errors
from config.settings import ModelConfig
from gateway.inputs.preprocessors import Preprocessors
from gateway.queue.model_calls import ModelCalls
from gateway.shared_memory import agreed
from models.base import ModelInfo
from models.media import MediaLimits
from models.packing import unpack_arrays
from models.quantization import CALIBRATION_TEXTS, Quantizer, read_configured_ranges

logger = logging.getLogger(__name__)
CALIBRATION_CHUNK = 16  # rows per call: the same batches at every start, so the same vectors
# A query, and a document long enough to fill most models' inputs (truncated to the model's length).
COST_TEXTS = (CALIBRATION_TEXTS[0], " ".join(CALIBRATION_TEXTS[:60]))


async def warm_up(
    info: ModelInfo, calls: ModelCalls, preprocessors: Preprocessors, settings: ModelConfig, limits: MediaLimits
) -> Quantizer | None:
    """Raises if the model fails or answers the wrong shape; returns a dense single-vector model's quantizer."""
    rows = warmup_rows(info, preprocessors)
    outputs = await calls.send(info, rows)
    calls.learn(info)
    wrong = [
        array.shape
        for row, output in zip(rows, outputs)
        for name, array in _by_representation(info, row, output)
        if not _fits(info, name, array)
    ]
    if wrong:
        raise errors.InferenceError(
            f"it answered outputs of shape {sorted(set(wrong))}; the model reports {info.dimension} features"
        )
    if not info.live_lane:  # a model with a live lane runs queries beside its calls: no call of it is cut
        await _learn_cost(info, calls, preprocessors, limits)
    if info.spec.quantizable and not info.multi_vector:
        return await _quantizer(info, calls, preprocessors, settings, limits)
    return None


async def _learn_cost(info: ModelInfo, calls: ModelCalls, preprocessors: Preprocessors, limits: MediaLimits) -> None:
    """Time the model on a query-sized text and on document-sized ones (`ModelCalls.learn_cost`): what cuts its calls
    beside live queries. A model that cannot take them as texts keeps its calls uncut; it serves all the same."""
    name, preprocessor = info.served_model_name, preprocessors.of(info)
    try:
        short, long = (preprocessor.calibration_rows(name, [text], limits)[0] for text in COST_TEXTS)
        await calls.learn_cost(info, short, long)
    except Exception as exc:  # whatever the cause, timing is no reason to refuse a model that answered its warm-up
        logger.warning(
            "model '%s': its pass cost could not be timed (%s); its calls are not cut", name, type(exc).__name__
        )


def warmup_rows(info: ModelInfo, preprocessors: Preprocessors) -> list[Any]:
    """A row through every modality; for a model with several representations, one more asking all of them."""
    return preprocessors.of(info).warmup_rows(info.served_model_name)


def _by_representation(info: ModelInfo, row: Any, output: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """A warm-up output by representation: a packed row's parts, else the model's own output."""
    asked = getattr(row, "representations", None)
    if asked is None:
        return [(info.spec.representations[0] if info.spec.representations else "scores", output)]
    return list(zip(asked, unpack_arrays(output)))


def _fits(info: ModelInfo, representation: str, array: np.ndarray) -> bool:
    """Vocabulary weights as (2, active) with indices in the vocabulary (a SPLADE model's `dimension`); vectors
    and scores with the model's `dimension` of features."""
    if representation != "sparse":
        return array.shape[-1] == info.dimension
    in_vocabulary = not array.shape[1] or not info.sparse or array[0].max() < info.dimension
    return array.ndim == 2 and array.shape[0] == 2 and in_vocabulary


async def _quantizer(
    info: ModelInfo, calls: ModelCalls, preprocessors: Preprocessors, settings: ModelConfig, limits: MediaLimits
) -> Quantizer:
    """The model's scheme, with parameters configured, or from the calibration texts embedded in fixed chunks,
    one call at a time."""
    name = info.served_model_name
    scheme, configured = settings.quantization, settings.quantization_ranges
    if configured:
        return Quantizer(scheme, configured=read_configured_ranges(configured, info.dimension, scheme))
    vectors, started = [], time.perf_counter()
    for start in range(0, len(CALIBRATION_TEXTS), CALIBRATION_CHUNK):
        texts = CALIBRATION_TEXTS[start : start + CALIBRATION_CHUNK]
        vectors += await calls.send(info, preprocessors.of(info).calibration_rows(name, texts, limits))
    logger.info(
        "model '%s': int8/uint8 %s quantization calibrated on %d texts in %.2f s",
        name,
        scheme,
        len(vectors),
        time.perf_counter() - started,
    )
    return Quantizer(scheme, calibration=agreed(f"calibration {name}", np.stack(vectors)))
