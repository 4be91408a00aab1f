"""Which representations a query asks of a model with several (BGE-M3), and each input's outputs by name.

A row of such a model that names representations gets them packed into its one output (`models.packing`);
a model with one representation answers it as it is.
"""

from __future__ import annotations

import numpy as np

from gateway.queries import EmbedQuery, RankQuery
from models.base import ModelInfo, Representation
from models.kinds import ScoreMode
from models.packing import unpack_arrays
from models.scores import HYBRID_WEIGHTS, late_interaction, mode_scores, weighted_mean


def row_representations(asked: tuple[Representation, ...] | None, info: ModelInfo) -> tuple[Representation, ...] | None:
    """What a row names: the asked representations where the model has several, else nothing."""
    return asked if asked is not None and len(info.spec.representations) > 1 else None


def score_mode(query: RankQuery, info: ModelInfo) -> ScoreMode | None:
    """How a ranking scores: the query's mode, else the model's default; None for a model that ranks one way."""
    modes = info.spec.score_modes
    return query.score_mode or (modes[0] if modes else None)


def representations_for(mode: ScoreMode | None, info: ModelInfo) -> tuple[Representation, ...] | None:
    """The representations a score mode reads: all of them for `hybrid`, else the one named (None: a model that
    ranks one way)."""
    if mode is None:
        return None
    return info.spec.representations if mode == "hybrid" else (mode,)


def asked_parts(
    query: EmbedQuery, info: ModelInfo, outputs: list[np.ndarray]
) -> list[dict[Representation, np.ndarray]] | None:
    """Each input's asked representations by name; None when the query named none (`output_types`)."""
    asked = query.representations
    if asked is None:
        return None
    if row_representations(asked, info) is None:
        return [{asked[0]: output} for output in outputs]
    return [dict(zip(asked, unpack_arrays(output))) for output in outputs]


def scores_by_mode(
    info: ModelInfo, query: RankQuery, mode: ScoreMode | None, outputs: list[np.ndarray]
) -> tuple[np.ndarray, dict[str, list[float]]]:
    """Each document's score by a model's own outputs (the query's first, then the documents'), and by every
    mode read: a ColBERT model's MaxSim (the sum over the query's vectors); a model with several
    representations by FlagEmbedding's scores, `hybrid` their weighted mean."""
    query_output, *documents = outputs
    asked = representations_for(mode, info)
    if mode is None or asked is None:  # one representation (asked is None then): late interaction
        scores = [late_interaction(query_output, document) for document in documents]
        return np.array(scores, dtype=np.float32), {info.spec.representations[0]: scores}
    query_parts = dict(zip(asked, unpack_arrays(query_output)))
    pairs = [mode_scores(query_parts, dict(zip(asked, unpack_arrays(document)))) for document in documents]
    if mode == "hybrid":
        weights: dict[str, float] = dict(zip(info.spec.representations, query.weights or HYBRID_WEIGHTS))
        for pair in pairs:
            pair["hybrid"] = weighted_mean(pair, weights)
    by_mode = {name: [pair[name] for pair in pairs] for name in pairs[0]}  # documents are never empty
    return np.array([pair[mode] for pair in pairs], dtype=np.float32), by_mode
