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


def similarities(query: np.ndarray, documents: list[np.ndarray], multi_vector: bool) -> np.ndarray:
    """Each document's score against the query by their embeddings: MaxSim for multi-vector models (ColPali),
    else the dot product of unit vectors (CLIP)."""
    if multi_vector:
        return np.array([late_interaction(query, document) for document in documents], dtype=np.float32)
    return np.stack(documents) @ query


def sparse_dot(query: np.ndarray, document: np.ndarray) -> float:
    """The dot product of two (2, active) [indices; weights] sparse vectors: the weights of shared ids."""
    _, at_query, at_document = np.intersect1d(query[0], document[0], assume_unique=True, return_indices=True)
    return float(np.dot(query[1, at_query].astype(np.float64), document[1, at_document]))


def mode_scores(query: dict[str, np.ndarray], document: dict[str, np.ndarray]) -> dict[str, float]:
    """A (query, document) pair's score by each representation both have, as FlagEmbedding's BGE-M3 scores: the
    dense dot product, the sparse one, and the ColBERT MaxSim averaged over the query's vectors."""
    found = {}
    if "dense" in query:
        found["dense"] = float(np.dot(query["dense"].astype(np.float64), document["dense"]))
    if "sparse" in query:
        found["sparse"] = sparse_dot(query["sparse"], document["sparse"])
    if "colbert" in query:
        found["colbert"] = late_interaction(query["colbert"], document["colbert"]) / max(len(query["colbert"]), 1)
    return found


# FlagEmbedding's weights for BGE-M3's hybrid score, (dense, sparse, colbert): the ones its model card uses.
HYBRID_WEIGHTS = (0.4, 0.2, 0.4)


def weighted_mean(scores: dict[str, float], weights: dict[str, float]) -> float:
    """FlagEmbedding's `compute_score` mix: (w_dense·dense + w_sparse·sparse + w_colbert·colbert) / Σw."""
    return sum(weights[mode] * scores[mode] for mode in weights) / sum(weights.values())


def rank(scores: np.ndarray, top_n: int | None) -> list[int]:
    """Indices by score, highest first (ties keep input order), cut to `top_n`."""
    order = np.argsort(-scores, kind="stable").tolist()
    return order if top_n is None else order[:top_n]
