"""Embento's gateway: the OpenAI-compatible HTTP service that composes the model services.

Requests are validated, tokenized and (for images and audio) decoded and processed here, so usage counts
real tokens and bad input fails before queuing. Rows go to the model service of the model's kind
(`TextEmbedder`, `Reranker` for rerankers and classifiers, `ClipEmbedder`, `ClapEmbedder`,
`ColPaliEmbedder`), whose adaptive batching merges concurrent requests. Errors of every kind leave in
OpenAI's shape.
"""

from __future__ import annotations

import os

os.environ.setdefault("BENTOML_DO_NOT_TRACK", "True")  # no usage tracking unless a user opts in

import asyncio
import functools
import ipaddress
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import bentoml
import numpy as np
from starlette.applications import Starlette

from gateway.admission import Admission
from gateway.coalesce import Coalescer
from gateway.deadline import WatchDisconnect, until_done
from gateway.errors import OpenAIErrorBodies, error_response
from gateway.fetch import UrlFetcher, UrlPolicy
from gateway.guard import PROBE_PATHS, RequestGuard
from gateway.media_inputs import load_item
from gateway.metrics import ABANDONED, REQUESTS_PER_CALL, TRACE, RequestTrace, current_trace
from gateway.probes import ReadinessReport, get_routes
from gateway.routing import check_modalities, choose_model
from gateway.schemas import (
    EmbeddingRequest,
    EmbeddingResponse,
    FailedModel,
    InputItem,
    LegacyMediaRequest,
    ModelCard,
    ModelList,
    SparseEmbeddingRequest,
    SparseValue,
    embedding_response,
    sparse_values,
    validated_inputs,
)
from gateway.scoring import (
    ClassifyRequest,
    ClassifyResponse,
    CohereV2RerankRequest,
    CohereV2RerankResponse,
    InfinityRerankResponse,
    Ranking,
    RerankRequest,
    RerankResponse,
    classify_response,
    cohere_v2_rerank_response,
    infinity_rerank_response,
    rerank_response,
    validated_documents,
    validated_texts,
)
from gateway.warmup import Warmup
from models import errors
from models.base import Kind, ModelInfo, ModelInput, Preprocessor, Row, TokenizedText
from models.config import ModelConfig
from models.kinds import model_kind
from models.media import MediaLimits
from models.media_processor import MediaProcessor
from models.resolve import resolve_model
from models.scores import activate, late_interaction, rank
from models.text_tokenizer import TextTokenizer
from runners.framework import fix_media_types, skip_untraced_middleware
from runners.image import ARGS, IMAGE, bento_envs
from runners.media import ClapEmbedder, ClipEmbedder, ColPaliEmbedder
from runners.pool import DROPPED_INPUTS
from runners.rerank import Reranker
from runners.settings import dispatch_max_rows, exit_nonzero_after_failed_start, load_models, stop_server
from runners.store import check_served_bento, pin_store_models, served_config
from runners.text import TextEmbedder

logger = logging.getLogger(__name__)
CONFIG = served_config()  # store models (`bentoml://…`) resolved to their folders
if not CONFIG.tracing:
    # With no exporter, BentoML's OpenTelemetry spans still cost CPU (/livez: 1117 req/s with them, 1870
    # without) and memory (a plain BentoML service grew by ~440 MB under 200 connections before levelling
    # off). Off unless tracing is asked for.
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    skip_untraced_middleware()
KINDS: dict[str, Kind] = {m.served_model_name: model_kind(m) for m in CONFIG.models}
# Which model service runs each kind: the Gateway attribute that holds it, the service, its batchable API.
RUNNERS: dict[Kind, tuple[str, Any, str]] = {
    "embed": ("embedder", TextEmbedder, "embed"),
    "sparse": ("embedder", TextEmbedder, "embed"),
    "rerank": ("reranker", Reranker, "score"),
    "classify": ("reranker", Reranker, "score"),
    "clip": ("clip_embedder", ClipEmbedder, "encode"),
    "clap": ("clap_embedder", ClapEmbedder, "encode"),
    "colpali": ("colpali_embedder", ColPaliEmbedder, "encode"),
}
# The Gateway attributes of the model services this configuration uses, each once.
SERVICE_ATTRIBUTES = list(dict.fromkeys(RUNNERS[kind][0] for kind in KINDS.values()))
API_OF = {attribute: api for attribute, _, api in RUNNERS.values()}
SERVICE_NAMES = {attribute: runner.name for attribute, runner, _ in RUNNERS.values()}
TEXT_KINDS = ("embed", "sparse", "rerank", "classify")
LIMITS = MediaLimits(CONFIG.max_item_bytes, CONFIG.max_image_pixels, CONFIG.max_audio_seconds)
STARTED = int(time.time())
WARMUP_RETRY_S = 1.0
READINESS_TIMEOUT_S = 1
CANCEL_TIMEOUT_S = 5
INLINE_TOKENIZE_LIMIT = 2048  # characters (or token ids) per request

T = TypeVar("T")


def depend_on_model_services(cls: type[T]) -> type[T]:
    """Only the model services this configuration needs are started, and built into a Bento."""
    for kind in KINDS.values():
        attribute, runner, _ = RUNNERS[kind]
        setattr(cls, attribute, bentoml.depends(runner))
    return cls


routes = Starlette()  # GET routes; BentoML's own API routes are POST-only


@bentoml.service(
    name="Embento",
    image=IMAGE,
    envs=bento_envs(ARGS.accel),
    labels={"accel": ARGS.accel, "models": ",".join(KINDS)},
    traffic={"timeout": CONFIG.request_timeout_s + 30},
    logging={"access": {"enabled": False}},
    http={"cors": {
        "enabled": bool(CONFIG.cors_allow_origins), "access_control_allow_origins": CONFIG.cors_allow_origins,
        "access_control_allow_methods": ["GET", "POST", "OPTIONS"],
        "access_control_allow_headers": ["Authorization", "Content-Type"],
    }},
)
@bentoml.asgi_app(routes, path="/")
@pin_store_models(CONFIG.models)  # the gateway reads their tokenizers and processors
@depend_on_model_services
class Gateway:
    def __init__(self) -> None:
        if "colpali" not in KINDS.values():  # only ColPali's processor needs torch tensors
            # transformers imports torch (and scipy, sklearn) whenever it can: 460 MiB of RSS in a process
            # that only tokenizes and resizes; without them, 125 MiB. Read once, at transformers' import.
            os.environ.setdefault("USE_TORCH", "0")
        self.tokenizers: dict[str, Preprocessor] = {}
        self.processors: dict[str, MediaProcessor] = {}
        _, self._failed_here = load_models(CONFIG.models, self._load_preprocessor, CONFIG.allow_partial)
        self.fetcher = UrlFetcher(UrlPolicy(
            allow_private=CONFIG.allow_private_urls,
            allowed_networks=tuple(ipaddress.ip_network(n, strict=False) for n in CONFIG.url_allow_networks),
            timeout_s=CONFIG.url_timeout_s, max_bytes=CONFIG.max_item_bytes,
        )) if CONFIG.allow_url_inputs else None
        self.warmup = Warmup(self._fetch_infos, self._warm_up, CONFIG.allow_partial, stop_server)
        self._cancelling: set[asyncio.Task] = set()
        self.admission = {
            RUNNERS[kind][0]: Admission(RUNNERS[kind][1].name, CONFIG.max_queued_items, CONFIG.max_queued_tokens)
            for kind in dict.fromkeys(KINDS.values())
        }
        self.coalescers = {
            attribute: Coalescer(functools.partial(self._call_runner, attribute), dispatch_max_rows(), _count_dropped)
            for attribute in SERVICE_ATTRIBUTES
        }

    def _load_preprocessor(self, cfg: ModelConfig) -> None:
        folder, kind = resolve_model(cfg.model_id, cfg.revision), KINDS[cfg.served_model_name]
        if kind in TEXT_KINDS:
            self.tokenizers[cfg.served_model_name] = TextTokenizer(folder, cfg, kind)
        else:
            self.processors[cfg.served_model_name] = MediaProcessor(folder, cfg, kind)

    def _runner(self, kind: Kind) -> Callable[[list[Any]], Awaitable[list[np.ndarray]]]:
        return self.coalescers[RUNNERS[kind][0]].run

    @property
    def infos(self) -> dict[str, ModelInfo]:
        """The models served, once warm, in configuration order (the first is the default)."""
        return self.warmup.infos

    @property
    def failed(self) -> dict[str, str]:
        """Served name -> why it failed to load or to warm up (allow_partial), once warm."""
        return self.warmup.failed

    @bentoml.on_startup
    async def _start_warmup(self) -> None:
        async def keep_trying() -> None:
            while not await self.warmup.attempt() and not self.warmup.stopped:
                await asyncio.sleep(WARMUP_RETRY_S)

        self._warmup_task = asyncio.create_task(keep_trying())

    async def is_warm(self) -> bool:
        """True once every model has reported its facts (or why it failed) and answered a real call."""
        return await self.warmup.attempt()

    async def _fetch_infos(self) -> tuple[dict[str, ModelInfo], dict[str, str]]:
        """The models each service serves, and those that failed to load here or there."""
        reports = [await getattr(self, a).to_async.model_info() for a in SERVICE_ATTRIBUTES]
        failed = {name: reason for report in reports for name, reason in report["failed"].items()}
        failed.update(self._failed_here)
        infos = {i["served_model_name"]: ModelInfo(**i) for report in reports for i in report["models"]}
        missing = set(KINDS) - set(infos) - set(failed)
        if missing:
            raise errors.NotReady(f"no model service reported {sorted(missing)}")
        # configuration order: the first is the default
        return {name: infos[name] for name in KINDS if name not in failed}, failed

    async def _warm_up(self, info: ModelInfo) -> None:
        """One real call through every modality the model serves; raises if it fails or answers the wrong shape."""
        outputs = _checked(await self._runner(info.kind)(self._warmup_rows(info)))
        if info.sparse:
            wrong = [o.shape for o in outputs if o.shape[0] != 2 or (o.shape[1] and o[0].max() >= info.dimension)]
        else:
            wrong = [output.shape for output in outputs if output.shape[-1] != info.dimension]
        if wrong:
            raise errors.InferenceError(f"it answered outputs of shape {sorted(set(wrong))}; the model reports "
                                        f"{info.dimension} features")

    def _warmup_rows(self, info: ModelInfo) -> list[Any]:
        name = info.served_model_name
        if name in self.processors:
            return self.processors[name].warmup_rows(name)
        if info.kind == "rerank":
            return TokenizedText.rows(name, *self.tokenizers[name].encode_pairs("warm-up", ["warm-up"]))
        return TokenizedText.rows(name, self.tokenizers[name].encode_texts(["warm-up"]))

    async def __is_ready__(self) -> bool:
        return await self.is_warm() and bool(self.infos) and await self._model_services_answer() is None

    async def readiness(self) -> dict[str, Any]:
        """/readyz's body: whether requests can be served, by which models, and which failed to load."""
        ready = await self.__is_ready__()
        return {"ready": ready, "models": list(self.infos), "failed": self.failed}

    async def _model_services_answer(self) -> str | None:
        """The first model service that does not answer its readiness probe within a second, or None.

        A model service restarting after a crash accepts connections it cannot answer yet; BentoML's own
        probe would wait 5 s on it, longer than an orchestrator's probe timeout.
        """
        for attribute in SERVICE_ATTRIBUTES:
            proxy_ready = getattr(getattr(self, attribute), "is_ready", None)  # remote services only
            try:
                if proxy_ready is not None and not await proxy_ready(READINESS_TIMEOUT_S):
                    return attribute
            except (aiohttp.ClientError, TimeoutError):  # BentoML's probe lets a total timeout escape
                return attribute
        return None

    async def _require_model(self, requested: str | None, capability: str) -> ModelInfo:
        if not await self.is_warm():
            raise errors.NotReady("models are still loading; retry shortly")
        if requested in self.failed:
            raise errors.ModelUnavailable(f"model '{requested}' failed to load: {self.failed[requested]}",
                                          param="model")
        info = choose_model(self.infos, requested, capability)
        current_trace().model = info.served_model_name
        return info

    @staticmethod
    async def _answer(work: Awaitable[T]) -> T:
        """The route's answer, or its error in OpenAI's shape; either way counted in the metrics."""
        trace = RequestTrace()
        token = TRACE.set(trace)
        try:
            answer = await work
            trace.finish(200)
            return answer
        except errors.EmbentoError as exc:
            response = error_response(exc)
            trace.finish(response.status_code)
            return response  # type: ignore[return-value]
        except Exception:  # a bug: BentoML answers 500
            trace.finish(500)
            raise
        finally:
            TRACE.reset(token)

    # Embeddings
    @bentoml.api(route="/v1/embeddings")
    async def embeddings(self, request: EmbeddingRequest, /) -> EmbeddingResponse:
        """OpenAI-compatible embeddings."""
        return await self._answer(self._embed(request))

    @bentoml.api(route="/embeddings")
    async def embeddings_unversioned(self, request: EmbeddingRequest, /) -> EmbeddingResponse:
        """The same, at infinity's path."""
        return await self._answer(self._embed(request))

    @bentoml.api(route="/embed_sparse")
    async def embed_sparse(self, request: SparseEmbeddingRequest, /) -> list[list[SparseValue]]:
        """TEI's sparse route: per input, its active vocabulary entries as `{"index", "value"}`."""
        async def embed() -> list[list[SparseValue]]:
            internal = request.as_embedding_request()
            info = await self._require_model(internal.model, "embed_sparse")
            return sparse_values(await self._embed(internal, info))

        return await self._answer(embed())

    @bentoml.api(route="/embeddings_image")
    async def embeddings_image(self, request: LegacyMediaRequest, /) -> EmbeddingResponse:
        """infinity's legacy image route: `input` is data URIs or URLs."""
        return await self._answer(self._embed(request.as_embedding_request("image")))

    @bentoml.api(route="/embeddings_audio")
    async def embeddings_audio(self, request: LegacyMediaRequest, /) -> EmbeddingResponse:
        """infinity's legacy audio route: `input` is data URIs or URLs."""
        return await self._answer(self._embed(request.as_embedding_request("audio")))

    async def _embed(self, request: EmbeddingRequest, info: ModelInfo | None = None) -> EmbeddingResponse:
        info = info or await self._require_model(request.model, "embed")
        items = validated_inputs(request, info, CONFIG.max_client_batch_size, CONFIG.max_media_items,
                                 CONFIG.max_item_chars)
        check_modalities(self.infos, info, {item.modality for item in items})
        if info.served_model_name in self.tokenizers:
            outputs, tokens = await self._embed_text(info, [item.value for item in items], request)
        else:
            outputs, tokens = await self._embed_media(info, items)
        return embedding_response(info, outputs, request, tokens)

    async def _embed_text(
        self, info: ModelInfo, inputs: list[str] | list[list[int]], request: EmbeddingRequest
    ) -> tuple[list[np.ndarray], int]:
        tokenizer = self.tokenizers[info.served_model_name]
        prompt_length = 0
        if isinstance(inputs[0], str):
            prompt = tokenizer.prompt(request.prompt_name, request.instruction)
            prompt_length = tokenizer.prompt_length(prompt) if prompt else 0
            work = functools.partial(tokenizer.encode_texts, inputs, prompt, request.truncation())
        else:
            work = functools.partial(tokenizer.encode_ids, inputs, request.truncation())
        token_ids = await _off_loop_if_large(work, sum(len(item) for item in inputs))
        rows = TokenizedText.rows(info.served_model_name, token_ids, prompt_length=prompt_length,
                                  normalize=request.normalize)
        return await self._run(info, rows), sum(len(ids) for ids in token_ids)

    async def _embed_media(self, info: ModelInfo, items: list[InputItem]) -> tuple[list[np.ndarray], int]:
        rows = await self._media_rows(info, items)
        return await self._run(info, rows), sum(row.length for row in rows)

    async def _media_rows(self, info: ModelInfo, items: list[InputItem]) -> list[ModelInput]:
        """Fetch or decode every item's bytes, then decode and process them off the event loop."""
        async def payload(index: int, item: InputItem) -> str | bytes:
            if item.modality == "text":
                return item.value  # type: ignore[return-value]
            return await load_item(item.value, self.fetcher, CONFIG.max_item_bytes, f"input[{index}]")  # type: ignore[arg-type]

        payloads = await asyncio.gather(*(payload(i, item) for i, item in enumerate(items)))
        processor = self.processors[info.served_model_name]
        work = [(item.modality, value) for item, value in zip(items, payloads)]
        return await asyncio.to_thread(processor.encode, info.served_model_name, work, LIMITS)

    # Rerank
    @bentoml.api(route="/rerank")
    async def rerank_infinity(self, request: RerankRequest, /) -> InfinityRerankResponse:
        """infinity's rerank: documents come back as plain strings."""
        shape = functools.partial(infinity_rerank_response, return_documents=request.return_documents)
        return await self._answer(self._rerank(request, shape))

    @bentoml.api(route="/v1/rerank")
    async def rerank_v1(self, request: RerankRequest, /) -> RerankResponse:
        """Cohere v1 and Jina rerank: documents come back as `{"text": ...}`."""
        shape = functools.partial(rerank_response, return_documents=request.return_documents)
        return await self._answer(self._rerank(request, shape))

    @bentoml.api(route="/v2/rerank")
    async def rerank_v2(self, request: CohereV2RerankRequest, /) -> CohereV2RerankResponse:
        """Cohere v2 rerank: indices and scores only."""
        return await self._answer(self._rerank(request, cohere_v2_rerank_response))

    async def _rerank(self, request: RerankRequest, shape: Callable[[Ranking], T]) -> T:
        """Score every (query, document) pair; `shape` writes the ranking in the route's wire format."""
        info = await self._require_model(request.model, "rerank")
        if info.served_model_name in self.processors:
            documents = validated_documents(request, CONFIG.max_media_items, CONFIG.max_item_chars,
                                            text_documents=False)
            if request.instruction is not None:
                raise errors.InvalidRequest(f"model '{info.served_model_name}' takes no instruction",
                                            param="instruction")
            scores, tokens = await self._rank_images(info, request.query, documents)
        else:
            documents = validated_documents(request, CONFIG.max_client_batch_size, CONFIG.max_item_chars,
                                            text_documents=True)
            scores, tokens = await self._rank_texts(info, request, documents)
        return shape(Ranking(model=info.served_model_name, order=rank(scores, request.top_n), scores=scores.tolist(),
                             documents=documents, tokens=tokens))

    async def _rank_texts(self, info: ModelInfo, request: RerankRequest, documents: list[str]
                          ) -> tuple[np.ndarray, int]:
        """A cross-encoder over each (query, document) pair."""
        query = request.query
        work = functools.partial(self.tokenizers[info.served_model_name].encode_pairs, query, documents,
                                 request.instruction, request.truncation())
        token_ids, segments = await _off_loop_if_large(work, len(query) * len(documents) + sum(map(len, documents)))
        logits = np.stack(await self._run(info, TokenizedText.rows(info.served_model_name, token_ids, segments)))
        scores = activate(logits, "identity" if request.raw_scores else info.activation)[:, 0]
        return scores, sum(len(ids) for ids in token_ids)

    async def _rank_images(self, info: ModelInfo, query: str, documents: list[str]) -> tuple[np.ndarray, int]:
        """Documents are images (data URIs or URLs): MaxSim late interaction for ColPali, cosine for CLIP."""
        items = [InputItem("text", query)] + [InputItem("image", document) for document in documents]
        rows = await self._media_rows(info, items)
        query_vectors, *pages = await self._run(info, rows)
        if info.multi_vector:
            scores = np.array([late_interaction(query_vectors, page) for page in pages], dtype=np.float32)
        else:
            scores = np.stack(pages) @ query_vectors
        return scores, sum(row.length for row in rows)

    # Classify
    @bentoml.api(route="/v1/classify")
    async def classify(self, request: ClassifyRequest, /) -> ClassifyResponse:
        """infinity's classify: every label's score per input."""
        return await self._answer(self._classify(request))

    @bentoml.api(route="/classify")
    async def classify_unversioned(self, request: ClassifyRequest, /) -> ClassifyResponse:
        """The same, at infinity's path."""
        return await self._answer(self._classify(request))

    async def _classify(self, request: ClassifyRequest) -> ClassifyResponse:
        info = await self._require_model(request.model, "classify")
        texts = validated_texts(request, CONFIG.max_client_batch_size, CONFIG.max_item_chars)
        tokenizer = self.tokenizers[info.served_model_name]
        work = functools.partial(tokenizer.encode_texts, texts, "", request.truncation())
        token_ids = await _off_loop_if_large(work, sum(map(len, texts)))
        logits = np.stack(await self._run(info, TokenizedText.rows(info.served_model_name, token_ids)))
        scores = activate(logits, "identity" if request.raw_scores else info.activation)
        return classify_response(info.served_model_name, info.labels, scores.tolist(),
                                 sum(len(ids) for ids in token_ids))

    async def _run(self, info: ModelInfo, rows: list[Row]) -> list[np.ndarray]:
        """Rows through the model's service; one output per input row, or a clear error."""
        tokens = sum(row.length for row in rows)
        if tokens > CONFIG.max_request_tokens:
            raise errors.InvalidRequest(
                f"the request holds {tokens} tokens after truncation; at most {CONFIG.max_request_tokens} are allowed",
                param="input",
            )
        request_id = uuid.uuid4().hex
        for row in rows:
            row.request_id = request_id
        trace = current_trace()
        trace.sending(len(rows), tokens)
        try:
            with self.admission[RUNNERS[info.kind][0]].admit(len(rows), tokens):
                outputs = await until_done(self._runner(info.kind)(rows), CONFIG.request_timeout_s)
        except (errors.RequestTimeout, errors.ClientGone) as exc:
            reason = "deadline" if isinstance(exc, errors.RequestTimeout) else "disconnect"
            self._abandon(info.kind, request_id, reason)
            raise
        trace.answered = time.perf_counter()
        return _checked(outputs)

    def _abandon(self, kind: Kind, request_id: str, reason: str) -> None:
        """Nobody waits for this request any more: its model service drops whatever of it is still queued."""
        attribute, runner, _ = RUNNERS[kind]
        ABANDONED.labels(model_service=runner.name, reason=reason).inc()

        async def cancel() -> None:
            try:
                await asyncio.wait_for(getattr(self, attribute).to_async.cancel([request_id]), CANCEL_TIMEOUT_S)
            except Exception as exc:  # the rows then run and are thrown away; nothing else is lost
                logger.warning("could not cancel a request on the %s service: %r", runner.name, exc)

        task = asyncio.create_task(cancel())
        self._cancelling.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._cancelling.discard)

    async def _call_runner(self, attribute: str, rows: list[Any]) -> list[np.ndarray]:
        """One call to a model service's batchable API (the coalescer's `send`); its failures as our errors.

        One retry when the connection broke: the model service may have closed a kept-alive connection as it
        was reused (bentoml #4971), or restarted. Inference is idempotent, so sending again is safe."""
        call = getattr(getattr(self, attribute).to_async, API_OF[attribute])
        REQUESTS_PER_CALL.labels(model_service=SERVICE_NAMES[attribute]).observe(len({row.request_id for row in rows}))
        try:
            try:
                return await call(rows)
            except aiohttp.ClientConnectionError as exc:
                logger.warning("connection to the %s service broke (%r); sending again", attribute, exc)
                return await call(rows)
        except bentoml.exceptions.BentoMLException as exc:
            if exc.error_code.value in (429, 503):
                raise errors.Overloaded("the model service is overloaded; retry later") from exc
            raise errors.InferenceError(f"the model service failed: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise errors.NotReady(f"the model service is unavailable ({type(exc).__name__}); retry shortly") from exc

    async def model_list(self) -> ModelList:
        if not await self.is_warm():
            raise errors.NotReady("models are still loading; retry shortly")
        return ModelList(data=[
            ModelCard(id=i.served_model_name, created=STARTED, modalities=i.modalities, capabilities=i.capabilities,
                      backend=i.backend, dimension=i.dimension, max_input_tokens=i.max_input_tokens,
                      multi_vector=i.multi_vector, sparse=i.sparse, labels=i.labels if i.kind == "classify" else None)
            for i in self.infos.values()
        ], failed=[FailedModel(id=name, error=reason) for name, reason in self.failed.items()])

    async def health(self) -> dict[str, float]:
        """infinity's /health, but honest: 200 only while every model is warm and its service answers."""
        if not await self.is_warm():
            raise errors.NotReady("models are not ready")
        if (silent := await self._model_services_answer()) is not None:
            raise errors.NotReady(f"the {silent} service is not ready")
        return {"unix": time.time()}


def _checked(outputs: list[np.ndarray]) -> list[np.ndarray]:
    """The outputs, unless the model failed on some input (`runners.pool.FAILED`) or answered NaN or inf.
    A sparse output with no active entry is (2, 0), not a failure."""
    failed = [i for i, output in enumerate(outputs) if output.shape == (0,) or not np.isfinite(output).all()]
    if failed:
        raise errors.InferenceError(
            f"the model failed on input(s) {failed[:10]} (an error, or NaN/inf output); see the server log"
        )
    return outputs


def _count_dropped(rows: list[Row]) -> None:
    """An abandoned request's rows that never reached the model service count as dropped, as those that did."""
    DROPPED_INPUTS.labels(model=rows[0].model).inc(len(rows))


async def _off_loop_if_large(work: Callable[[], T], size: int) -> T:
    """A thread hop costs more than tokenizing a few sentences; only big inputs leave the event loop."""
    if size <= INLINE_TOKENIZE_LIMIT:
        return work()
    return await asyncio.to_thread(work)


exit_nonzero_after_failed_start()
SERVICES = [Gateway, *(dependency.on for dependency in Gateway.dependencies.values())]
check_served_bento({service.name for service in SERVICES})
for service in SERVICES:
    fix_media_types(service)
routes.router.routes.extend(get_routes(CONFIG, KINDS))

# Added first = outermost. The readiness report is the probe's body itself, so it stands outside the
# error rewriting; every other error below, ours or the framework's, leaves in OpenAI's shape.
Gateway.add_asgi_middleware(ReadinessReport)
Gateway.add_asgi_middleware(OpenAIErrorBodies)
Gateway.add_asgi_middleware(
    RequestGuard, api_keys=CONFIG.api_keys(), max_request_bytes=CONFIG.max_request_bytes,
    open_paths=PROBE_PATHS | ({"/metrics"} if CONFIG.public_metrics else set()),
    max_concurrent_requests=CONFIG.max_concurrent_requests,
)
Gateway.add_asgi_middleware(WatchDisconnect)
