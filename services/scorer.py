"""Reranker: one BentoML model service for every configured reranker and text classifier.

Both are sequence-classification heads over tokens: (query, document) pairs for rerankers, single texts
for classifiers. Rows from all requests and all these models share its adaptive batches.
"""

from __future__ import annotations

from pathlib import Path

import bentoml
import numpy as np

from bento.patches import make_work_conserving
from bento.store import pin_store_models
from config.settings import ModelConfig
from models.base import TokenizedText
from models.kinds import model_kind
from models.text_scorer import TextScorer
from services.pool import PooledService, pool_for
from services.service_config import (
    DISPATCH_MAX_LATENCY_MS,
    dispatch_max_rows,
    model_service_config,
    models_of_kind,
)

make_work_conserving()


def _load_scorer(folder: Path, cfg: ModelConfig) -> TextScorer:
    return TextScorer(folder, cfg, model_kind(cfg))


@bentoml.service(name="Reranker", **model_service_config("rerank", "classify"))
@pin_store_models(models_of_kind("rerank", "classify"))
class Reranker(PooledService):
    def __init__(self) -> None:
        self.pool = pool_for(type(self).__name__, _load_scorer, "rerank", "classify")

    @bentoml.api(batchable=True, max_batch_size=dispatch_max_rows(), max_latency_ms=DISPATCH_MAX_LATENCY_MS)
    async def score(self, rows: list[TokenizedText]) -> list[np.ndarray]:
        """Token ids in, one row of logits per row out (an empty array where the model failed on that row)."""
        return await self.pool.run(rows)
