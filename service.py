"""Embento's gateway: the OpenAI-compatible HTTP service that composes the model services.

Requests are validated and tokenized here (so usage counts real tokens and over-long input is cut before
queuing); token ids go to the `TextEmbedder` model service, whose adaptive batching merges concurrent
requests. Errors of every kind leave in OpenAI's shape.
"""

from __future__ import annotations

import os

os.environ.setdefault("BENTOML_DO_NOT_TRACK", "True")  # no usage tracking unless a user opts in

import asyncio
import functools
import logging
import time

import aiohttp
import bentoml
import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.errors import OpenAIErrorBodies, error_response
from gateway.guard import RequestGuard
from gateway.schemas import (
    EmbeddingData,
    EmbeddingRequest,
    EmbeddingResponse,
    ModelCard,
    ModelList,
    Usage,
    validated_inputs,
)
from models import errors
from models.base import ModelInfo, Preprocessor
from models.config import get_config
from models.postprocess import to_base64, truncate_dimensions
from models.resolve import resolve_model
from models.text_tokenizer import TextTokenizer
from runners.text import TextEmbedder, TokenizedText

logger = logging.getLogger(__name__)
CONFIG = get_config()
STARTED = int(time.time())
WARMUP_RETRY_S = 1.0
INLINE_TOKENIZE_LIMIT = 2048  # characters (or token ids) per request

routes = Starlette()  # GET routes; BentoML's own API routes are POST-only


@bentoml.service(
    name="Embento",
    traffic={"timeout": CONFIG.request_timeout_s + 30},
    logging={"access": {"enabled": False}},
)
@bentoml.asgi_app(routes, path="/")
class Gateway:
    embedder = bentoml.depends(TextEmbedder)

    def __init__(self) -> None:
        self.tokenizers: dict[str, Preprocessor] = {
            m.served_model_name: TextTokenizer(resolve_model(m.model_id, m.revision), m) for m in CONFIG.models
        }
        self.infos: dict[str, ModelInfo] = {}
        self._warm_lock = asyncio.Lock()

    @bentoml.on_startup
    async def _start_warmup(self) -> None:
        async def keep_trying() -> None:
            while not await self.is_warm():
                await asyncio.sleep(WARMUP_RETRY_S)

        self._warmup_task = asyncio.create_task(keep_trying())

    async def is_warm(self) -> bool:
        """True once every model has reported its facts and answered a real embedding call."""
        if self.infos:
            return True
        async with self._warm_lock:
            if self.infos:
                return True
            try:
                infos = {i["served_model_name"]: ModelInfo(**i) for i in await self.embedder.to_async.model_info()}
                for name, tokenizer in self.tokenizers.items():
                    rows = [TokenizedText(model=name, input_ids=ids) for ids in tokenizer.encode_texts(["warm-up"])]
                    vectors = await self.embedder.to_async.embed(rows)
                    if vectors[0].shape != (infos[name].dimension,):
                        raise errors.InferenceError(f"warm-up of '{name}' returned no embedding")
            except Exception as exc:  # not up yet, or broken: either way not ready
                logger.info("models not ready yet: %r", exc)
                return False
            self.infos = infos
            logger.info("all models warm: %s", sorted(infos))
            return True

    async def __is_ready__(self) -> bool:
        return await self.is_warm()

    async def _require_model(self, requested: str | None) -> tuple[ModelInfo, Preprocessor]:
        if not await self.is_warm():
            raise errors.NotReady("models are still loading; retry shortly")
        name = requested if requested is not None else CONFIG.models[0].served_model_name
        if name not in self.infos:
            raise errors.UnknownModel(
                f"model '{name}' is not served here; served models: {sorted(self.infos)}", param="model"
            )
        return self.infos[name], self.tokenizers[name]

    @bentoml.api(route="/v1/embeddings")
    async def embeddings(self, request: EmbeddingRequest, /) -> EmbeddingResponse:
        """OpenAI-compatible embeddings."""
        return await self._answer(request)

    @bentoml.api(route="/embeddings")
    async def embeddings_unversioned(self, request: EmbeddingRequest, /) -> EmbeddingResponse:
        """The same, at infinity's path."""
        return await self._answer(request)

    async def _answer(self, request: EmbeddingRequest) -> EmbeddingResponse:
        try:
            return await self._embed(request)
        except errors.EmbentoError as exc:
            return error_response(exc)  # type: ignore[return-value]

    async def _embed(self, request: EmbeddingRequest) -> EmbeddingResponse:
        info, tokenizer = await self._require_model(request.model)
        inputs = validated_inputs(request, info, CONFIG.max_client_batch_size)
        token_ids = await self._tokenize(tokenizer, inputs, request.prompt_name)
        vectors = await self._run(info.served_model_name, token_ids)
        vectors = truncate_dimensions(vectors, request.dimensions, renormalize=info.normalized)
        encode = to_base64 if request.encoding_format == "base64" else np.ndarray.tolist
        data = [EmbeddingData.model_construct(object="embedding", index=i, embedding=encode(v))
                for i, v in enumerate(vectors)]
        tokens = sum(len(ids) for ids in token_ids)
        return EmbeddingResponse.model_construct(
            object="list", data=data, model=info.served_model_name,
            usage=Usage.model_construct(prompt_tokens=tokens, total_tokens=tokens),
        )

    @staticmethod
    async def _tokenize(
        tokenizer: Preprocessor, inputs: list[str] | list[list[int]], prompt_name: str | None
    ) -> list[list[int]]:
        if isinstance(inputs[0], str):
            work = functools.partial(tokenizer.encode_texts, inputs, tokenizer.prompt(prompt_name))
        else:
            work = functools.partial(tokenizer.encode_ids, inputs)
        # A thread hop costs more than tokenizing a few sentences; only big inputs leave the event loop.
        if sum(len(item) for item in inputs) <= INLINE_TOKENIZE_LIMIT:
            return work()
        return await asyncio.to_thread(work)

    async def _run(self, model: str, token_ids: list[list[int]]) -> np.ndarray:
        rows = [TokenizedText(model=model, input_ids=ids) for ids in token_ids]
        try:
            vectors = await asyncio.wait_for(self.embedder.to_async.embed(rows), CONFIG.request_timeout_s)
        except asyncio.TimeoutError:
            raise errors.RequestTimeout(
                f"the request did not finish within {CONFIG.request_timeout_s:g} s"
            ) from None
        except bentoml.exceptions.BentoMLException as exc:
            if exc.error_code.value in (429, 503):
                raise errors.Overloaded("the model service is overloaded; retry later") from exc
            raise errors.InferenceError(f"the model service failed: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise errors.NotReady(f"the model service is unavailable ({type(exc).__name__}); retry shortly") from exc
        failed = [i for i, v in enumerate(vectors) if v.size == 0]
        if failed:
            raise errors.InferenceError(f"the model failed on input(s) {failed[:10]}; see the server log")
        return np.stack(vectors)

    async def model_list(self) -> ModelList:
        if not await self.is_warm():
            raise errors.NotReady("models are still loading; retry shortly")
        return ModelList(data=[
            ModelCard(id=i.served_model_name, created=STARTED, modality=i.modality, capabilities=i.capabilities,
                      backend=i.backend, dimension=i.dimension, max_input_tokens=i.max_input_tokens)
            for i in self.infos.values()
        ])

    async def health(self) -> dict[str, float]:
        """infinity's /health, but honest: 200 only while every model is warm and its service answers."""
        proxy_ready = getattr(self.embedder, "is_ready", None)
        if not await self.is_warm() or (proxy_ready is not None and not await proxy_ready(5)):
            raise errors.NotReady("models are not ready")
        return {"unix": time.time()}


async def _get_models(request: Request) -> Response:
    try:
        return JSONResponse((await bentoml.get_current_service().model_list()).model_dump())
    except errors.EmbentoError as exc:
        return error_response(exc)


async def _get_health(request: Request) -> Response:
    try:
        return JSONResponse(await bentoml.get_current_service().health())
    except errors.EmbentoError as exc:
        return error_response(exc)


for path in ("/v1/models", "/models"):
    routes.router.routes.append(Route(path, _get_models, methods=["GET"]))
routes.router.routes.append(Route("/health", _get_health, methods=["GET"]))

# Added first = outermost: every error below, ours or the framework's, leaves in OpenAI's shape.
Gateway.add_asgi_middleware(OpenAIErrorBodies)
Gateway.add_asgi_middleware(RequestGuard, api_key=CONFIG.api_key, max_request_bytes=CONFIG.max_request_bytes)
