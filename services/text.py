"""TextEmbedder: one BentoML model service for every configured text-embedding model, dense or sparse."""

from __future__ import annotations

from pathlib import Path

import bentoml
import numpy as np

from bento.patches import make_work_conserving
from bento.store import pin_store_models
from config.settings import ModelConfig
from models.base import TokenizedText, TokenModel
from models.kinds import model_kind
from models.sparse_encoder import SparseTextEncoder
from models.text_encoder import TextEncoder
from services.pool import PooledService, pool_for
from services.service_config import (
    DISPATCH_MAX_LATENCY_MS,
    dispatch_max_rows,
    model_service_config,
    models_of_kind,
)

make_work_conserving()


def _load_text_model(folder: Path, cfg: ModelConfig) -> TokenModel:
    return SparseTextEncoder(folder, cfg) if model_kind(cfg) == "sparse" else TextEncoder(folder, cfg)


@bentoml.service(name="TextEmbedder", **model_service_config("embed", "sparse"))
@pin_store_models(models_of_kind("embed", "sparse"))
class TextEmbedder(PooledService):
    def __init__(self) -> None:
        self.pool = pool_for(type(self).__name__, _load_text_model, "embed", "sparse")

    @bentoml.api(batchable=True, max_batch_size=dispatch_max_rows(), max_latency_ms=DISPATCH_MAX_LATENCY_MS)
    async def embed(self, rows: list[TokenizedText]) -> list[np.ndarray]:
        """Token ids in, one embedding per row out (an empty array where the model failed on that row)."""
        return await self.pool.run(rows)
