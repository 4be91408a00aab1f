"""The multimodal model services: one per family, so each can get its own device and scale on its own.

Each takes `ModelInput` rows (the gateway has already decoded and processed images and audio) from all
requests and all its models, and answers one array per row: a vector, or a (tokens, dim) matrix for
ColPali. Batching, ordering and failure isolation are `ModelPool`'s.
"""

from __future__ import annotations

from typing import Any

import bentoml
import numpy as np

from bento.patches import make_work_conserving
from bento.store import pin_store_models
from models.base import ModelInput
from services.pool import PooledService, pool_for
from services.service_config import (
    DISPATCH_MAX_LATENCY_MS,
    dispatch_max_rows,
    model_service_config,
    models_of_service,
)

make_work_conserving()
BATCHING = {"batchable": True, "max_batch_size": dispatch_max_rows(), "max_latency_ms": DISPATCH_MAX_LATENCY_MS}


def _media_service(name: str, description: str) -> Any:
    """One BentoML service class per family (`name` is its kinds' `KindSpec.model_service`): the same API,
    its own process, device and scaling."""

    class MediaEmbedder(PooledService):
        def __init__(self) -> None:
            self.pool = pool_for(name)

        @bentoml.api(**BATCHING)
        async def encode(self, rows: list[ModelInput]) -> list[np.ndarray]:
            return await self.pool.run(rows)

    MediaEmbedder.__name__ = MediaEmbedder.__qualname__ = name
    MediaEmbedder.__doc__ = description
    pinned = pin_store_models(models_of_service(name))(MediaEmbedder)
    return bentoml.service(name=name, **model_service_config(name))(pinned)


ClipEmbedder = _media_service("ClipEmbedder", "CLIP, SigLIP and kin: texts and images.")
ClapEmbedder = _media_service("ClapEmbedder", "CLAP: texts and audio.")
ColPaliEmbedder = _media_service("ColPaliEmbedder", "ColPali and ColQwen2: page images and queries.")
