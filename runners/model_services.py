"""The model services, each built by `model_service`: one batchable API that takes rows from all requests and
all the service's models and answers one array per row (batching, ordering and failure isolation are
`ModelPool`'s), beside the APIs every model service has (`PooledService`).

The text services take token ids (`TokenizedText`). The multimodal ones take `ModelInput` rows, the gateway
having decoded and processed images and audio; there is one per family, so each can get its own device and
scale on its own.
"""

from __future__ import annotations

from types import GenericAlias
from typing import Annotated, Any

import bentoml
import numpy as np
from pydantic import BeforeValidator, SerializationInfo, SerializerFunctionWrapHandler, WrapSerializer

from bento.packaging.exports import carry_exports
from bento.packaging.store import pin_store_models
from bento.serving.patches import make_work_conserving
from models.base import ModelInput, TokenizedText
from runners.pool import PooledService, pool_for
from runners.residency import keep_resident
from runners.service_config import (
    DISPATCH_MAX_LATENCY_MS,
    dispatch_max_rows,
    model_service_config,
    models_of_service,
)

make_work_conserving()


class RowBatch:
    """Rows on their way to the model service, pickled as the objects they are rather than dumped to dicts and
    validated back into models there: BentoML's client dumped each batch twice, a sixth of the gateway's CPU
    for 32-input requests (bench/gateway_floor.py). pydantic's serializer leaves a type it does not know
    alone, where it would turn models into dicts. Rows are the gateway's own objects, made from validated
    requests."""

    def __init__(self, rows: list) -> None:
        self.rows = rows


def _batched(rows: list, to_json: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
    return to_json(rows) if info.mode_is_json() else RowBatch(rows)


def _unbatched(value: Any) -> Any:
    return value.rows if isinstance(value, RowBatch) else value


AS_IS = (WrapSerializer(_batched), BeforeValidator(_unbatched))


def model_service(name: str, api: str, row: type, description: str) -> Any:
    """The BentoML service `name` (its kinds' `KindSpec.model_service`) whose batchable API `api` (their
    `KindSpec.service_api`) takes a list of `row`: its own processes, device and scaling."""

    async def run(self: PooledService, rows: list) -> list[np.ndarray]:
        return await self.pool.run(rows)

    # BentoML names the API and its route after the function, and builds its IO descriptors from the
    # annotations, which must be types: this module's own annotations are strings.
    run.__name__, run.__qualname__ = api, f"{name}.{api}"
    run.__annotations__ = {"rows": Annotated[GenericAlias(list, (row,)), *AS_IS], "return": list[np.ndarray]}
    run.__doc__ = "Rows in, one array per row out (an empty array where the model failed on that row)."

    async def run_live(self: PooledService, rows: list) -> list[np.ndarray]:
        return await self.pool.run(rows, live=True)

    live_api = f"{api}_live"  # `KindSpec.live_api`
    run_live.__name__, run_live.__qualname__ = live_api, f"{name}.{live_api}"
    run_live.__annotations__ = run.__annotations__
    run_live.__doc__ = (
        "A live query's rows, run at once beside the batch in progress (not batched by BentoML: the gateway "
        "coalesces them); as the batchable API otherwise."
    )

    def __init__(self: PooledService) -> None:
        self.pool = pool_for(name)
        keep_resident(self.pool, name)  # its thread loads, unloads and evicts as the server's wanted set says

    batchable = bentoml.api(batchable=True, max_batch_size=dispatch_max_rows(), max_latency_ms=DISPATCH_MAX_LATENCY_MS)
    # `type` rather than a class statement: BentoML lists a service's APIs by attribute name, here `api`.
    apis = {api: batchable(run), live_api: bentoml.api(run_live)}
    service = type(name, (PooledService,), {"__init__": __init__, "__doc__": description, **apis})
    pinned = carry_exports(models_of_service(name))(pin_store_models(models_of_service(name))(service))
    return bentoml.service(name=name, **model_service_config(name))(pinned)


TextEmbedder = model_service(
    "TextEmbedder",
    "embed",
    TokenizedText,
    "Every configured text embedder (dense, sparse, ColBERT, BGE-M3): an output per row.",
)
Reranker = model_service(
    "Reranker",
    "score",
    TokenizedText,
    "Every configured reranker and text classifier, both sequence-classification heads over "
    "tokens ((query, document) pairs, or single texts): one row of logits per row.",
)
ClipEmbedder = model_service("ClipEmbedder", "encode", ModelInput, "CLIP, SigLIP and kin: texts and images.")
ClapEmbedder = model_service("ClapEmbedder", "encode", ModelInput, "CLAP: texts and audio.")
ColPaliEmbedder = model_service(
    "ColPaliEmbedder",
    "encode",
    ModelInput,
    "ColPali and ColQwen2 (page images and queries), and vision-language embedders and rerankers "
    "(Qwen3-VL-Embedding, Qwen3-VL-Reranker).",
)
