"""Reranker: one BentoML model service for every configured reranker and text classifier.

Both are sequence-classification heads over tokens: (query, document) pairs for rerankers, single texts
for classifiers. Rows from all requests and all these models share its adaptive batches.
"""

from __future__ import annotations

import bentoml
import numpy as np

from bento.patches import make_work_conserving
from bento.store import pin_store_models
from models.base import TokenizedText
from services.pool import PooledService, pool_for
from services.service_config import (
    DISPATCH_MAX_LATENCY_MS,
    dispatch_max_rows,
    model_service_config,
    models_of_service,
)

make_work_conserving()
NAME = "Reranker"  # the `KindSpec.model_service` of the kinds it runs


@bentoml.service(name=NAME, **model_service_config(NAME))
@pin_store_models(models_of_service(NAME))
class Reranker(PooledService):
    def __init__(self) -> None:
        self.pool = pool_for(NAME)

    @bentoml.api(batchable=True, max_batch_size=dispatch_max_rows(), max_latency_ms=DISPATCH_MAX_LATENCY_MS)
    async def score(self, rows: list[TokenizedText]) -> list[np.ndarray]:
        """Token ids in, one row of logits per row out (an empty array where the model failed on that row)."""
        return await self.pool.run(rows)
