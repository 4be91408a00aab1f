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


def row_representations(asked: tuple[Representation, ...] | None, info: ModelInfo
                        ) -> tuple[Representation, ...] | None:
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


def asked_parts(query: EmbedQuery, info: ModelInfo, outputs: list[np.ndarray]
                ) -> list[dict[Representation, np.ndarray]] | None:
    """Each input's asked representations by name; None when the query named none (`output_types`)."""
    asked = query.representations
    if asked is None:
        return None
    if row_representations(asked, info) is None:
        return [{asked[0]: output} for output in outputs]
    return [dict(zip(asked, unpack_arrays(output))) for output in outputs]
