"""From a scorer's logits to the scores clients see: activations and ranking."""

from __future__ import annotations

import numpy as np

from models.base import Activation


def activate(logits: np.ndarray, activation: Activation) -> np.ndarray:
    """Apply the model's activation row-wise (float64 inside, so large logits neither overflow nor round)."""
    values = logits.astype(np.float64)
    if activation == "sigmoid":
        values = 0.5 * (1.0 + np.tanh(0.5 * values))  # the logistic function, without exp overflow
    elif activation == "softmax":
        shifted = np.exp(values - values.max(axis=-1, keepdims=True))
        values = shifted / shifted.sum(axis=-1, keepdims=True)
    elif activation == "tanh":
        values = np.tanh(values)
    return values.astype(np.float32)


def late_interaction(query: np.ndarray, document: np.ndarray) -> float:
    """ColBERT/ColPali MaxSim: each query vector's best match among the document's, summed."""
    return float((query @ document.T).max(axis=1).sum())


def rank(scores: np.ndarray, top_n: int | None) -> list[int]:
    """Indices by score, highest first (ties keep input order), cut to `top_n`."""
    order = np.argsort(-scores, kind="stable").tolist()
    return order if top_n is None else order[:top_n]
