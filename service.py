"""Embento's gateway: the OpenAI-compatible HTTP service that composes the model services.

Requests are validated, tokenized and (for images and audio) decoded and processed here, so usage counts
real tokens and bad input fails before queuing. Rows go to the model service of the model's kind
(`TextEmbedder`, `Reranker` for rerankers and classifiers, `ClipEmbedder`, `ClapEmbedder`,
`ColPaliEmbedder`), whose adaptive batching merges concurrent requests. Each client's wire format (OpenAI,
infinity, Cohere, TEI, Jina) is a thin adapter (`gateway/`) onto one internal request and result
(`gateway.engine`). Errors leave in the route's client's shape.
"""

from __future__ import annotations

import os

os.environ.setdefault("BENTOML_DO_NOT_TRACK", "True")  # no usage tracking unless a user opts in

from bento.start_failures import report_start_failures  # noqa: E402

report_start_failures()  # first: the configuration is read while the imports below run, and may fail there

import asyncio
import functools
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import bentoml
from starlette.applications import Starlette
from starlette.responses import JSONResponse

from bento.container_image import ARGS, IMAGE, bento_envs, image_labels
from bento.lifecycle import exit_nonzero_after_failed_start, stop_server
from bento.patches import fix_media_types, read_long_buffer_lists, skip_untraced_middleware
from bento.placement import gateway_workers
from bento.process_memory import report_process_memory
from bento.store import bento_config_env, check_served_bento, pin_store_models
from config.served import served_config
from config.server_files import remove_server_files
from config.settings import ModelConfig
from gateway.admission import admission_counters
from gateway.cohere import (
    COHERE_EMBED_SHAPES,
    CohereEmbedRequest,
    CohereV2EmbedRequest,
    CohereV2RerankRequest,
    CohereV2RerankResponse,
    RerankResponse,
    cohere_v1_response,
    cohere_v2_rerank_response,
    cohere_v2_response,
    rerank_response,
)
from gateway.deadline import WatchDisconnect
from gateway.embeddings import ALL_SHAPES, Embeddings, Shape, check_output_types
from gateway.engine import Engine, ModelService
from gateway.errors import ErrorBodies, ErrorShape, error_response
from gateway.fetch import UrlFetcher, UrlPolicy
from gateway.guard import IN_FLIGHT, PROBE_PATHS, RequestGuard
from gateway.metrics import READY, TRACE, RequestTrace
from gateway.probes import ReadinessReport, get_routes
from gateway.schemas import (
    EmbeddingRequest,
    EmbeddingResponse,
    FailedModel,
    LegacyMediaRequest,
    ModelCard,
    ModelList,
    check_text_lengths,
    embedding_response,
)
from gateway.scoring import (
    ClassifyRequest,
    ClassifyResponse,
    InfinityRerankResponse,
    RerankRequest,
    checked_texts,
    classify_response,
    infinity_rerank_response,
    validated_texts,
)
from gateway.shared import SharedCounters
from gateway.tei import (
    TEI_EMBED_SHAPES,
    TEI_PATHS,
    RerankBody,
    SparseEmbeddingRequest,
    SparseValue,
    TeiDecodeRequest,
    TeiEmbedRequest,
    TeiPredictRequest,
    TeiRootRequest,
    TeiSimilarityRequest,
    TeiTokenizeRequest,
    TextClassificationParameters,
    embed_answer,
    label_scores,
    parsed,
    rerank_answer,
    similarity_answer,
    sparse_answer,
    tei_rerank_body,
    tokens_answer,
)
from gateway.warmup import Warmup
from models import errors
from models.base import Activation, Kind, ModelInfo
from models.kinds import gateway_needs_torch, model_kind
from models.media_processor import MediaProcessor
from models.resolve import resolve_model
from models.text_tokenizer import TextTokenizer
from services.loading import load_models
from services.media import ClapEmbedder, ClipEmbedder, ColPaliEmbedder
from services.scorer import Reranker
from services.service_config import dispatch_max_rows
from services.text import TextEmbedder

logger = logging.getLogger(__name__)
CONFIG = served_config()  # store models (`bentoml://…`) resolved to their folders
if not CONFIG.tracing:
    # With no exporter, BentoML's OpenTelemetry spans still cost CPU (/livez: 1117 req/s with them, 1870
    # without) and memory (a plain BentoML service grew by ~440 MB under 200 connections before levelling
    # off). Off unless tracing is asked for.
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    skip_untraced_middleware()
read_long_buffer_lists()
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
TEXT_KINDS = ("embed", "sparse", "rerank", "classify")
# Requests in flight and the work queued per model service, counted for the server across gateway workers.
COUNTERS = SharedCounters([IN_FLIGHT, *(counter for runner in dict.fromkeys(RUNNERS[kind][1] for kind in KINDS.values())
                                        for counter in admission_counters(runner.name))])
GATEWAY_NAME = "Embento"  # the BentoML service name of the gateway
STARTED = int(time.time())
WARMUP_RETRY_S = 1.0
READINESS_TIMEOUT_S = 1

T = TypeVar("T")
C = TypeVar("C", bound=CohereEmbedRequest)


def depend_on_model_services(cls: type[T]) -> type[T]:
    """Only the model services this configuration needs are started, and built into a Bento."""
    for kind in KINDS.values():
        attribute, runner, _ = RUNNERS[kind]
        setattr(cls, attribute, bentoml.depends(runner))
    return cls


routes = Starlette()  # GET routes; BentoML's own API routes are POST-only


@bentoml.service(
    name=GATEWAY_NAME,
    workers=gateway_workers(CONFIG),
    image=IMAGE,
    envs=[*bento_envs(ARGS), bento_config_env()],  # the configuration travels in bento.yaml
    labels={**image_labels(ARGS), "models": ",".join(KINDS)},
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
    """The HTTP routes: each a thin adapter from its client's wire format onto the engine and back."""

    def __init__(self) -> None:
        if not gateway_needs_torch(KINDS.values()):  # CLAP's and ColPali's processors need it (models/kinds.py)
            # transformers imports torch (and scipy, sklearn) whenever it can: 460 MiB of RSS in a process
            # that only tokenizes and resizes; without them, 125 MiB. Read once, at transformers' import.
            os.environ.setdefault("USE_TORCH", "0")
            # transformers then says "None of PyTorch ... have been found. Models won't be available": here
            # that is the intent, not a failure, and it would be a newcomer's first alarming line.
            logging.getLogger("transformers").addFilter(lambda record: not record.getMessage().startswith("None of"))
        COUNTERS.open()  # now, in the worker: a worker restarted after a crash frees what it held at once
        report_process_memory(GATEWAY_NAME)
        self.tokenizers: dict[str, TextTokenizer] = {}
        self.processors: dict[str, MediaProcessor] = {}
        _, self._failed_here = load_models(CONFIG.models, self._load_preprocessor, CONFIG.allow_partial)
        fetcher = UrlFetcher(UrlPolicy(
            allow_private=CONFIG.allow_private_urls,
            allowed_networks=tuple(ipaddress.ip_network(n, strict=False) for n in CONFIG.url_allow_networks),
            timeout_s=CONFIG.url_timeout_s, max_bytes=CONFIG.max_item_bytes,
        )) if CONFIG.allow_url_inputs else None
        self.warmup = Warmup(self._fetch_infos, lambda info: self.engine.warm_up(info), CONFIG.allow_partial,
                             stop_server)
        services = {kind: ModelService(attribute, runner.name, api)
                    for kind, (attribute, runner, api) in RUNNERS.items() if kind in KINDS.values()}
        self.engine = Engine(CONFIG, services, functools.partial(getattr, self), self.warmup, self.tokenizers,
                             self.processors, fetcher, dispatch_max_rows(), COUNTERS)

    def _load_preprocessor(self, cfg: ModelConfig) -> None:
        folder, kind = resolve_model(cfg.model_id, cfg.revision), KINDS[cfg.served_model_name]
        if kind in TEXT_KINDS:
            self.tokenizers[cfg.served_model_name] = TextTokenizer(folder, cfg, kind)
        else:
            self.processors[cfg.served_model_name] = MediaProcessor(folder, cfg, kind)

    # Warm-up and readiness
    @bentoml.on_startup
    async def _start_warmup(self) -> None:
        """The only warm-up tries: a probe or request that tried too would wait on a model service still
        starting for the client's whole timeout, and a stopping server waits for such a request to end.
        They read `warmup.done` instead."""
        async def keep_trying() -> None:
            while not await self.warmup.attempt() and not self.warmup.stopped:
                await asyncio.sleep(WARMUP_RETRY_S)
            await self.__is_ready__()  # into the readiness gauge, for servers no probe asks

        self._warmup_task = asyncio.create_task(keep_trying())

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

    async def __is_ready__(self) -> bool:
        ready = self.warmup.done and bool(self.engine.infos) and await self._model_services_answer() is None
        READY.set(int(ready))
        return ready

    async def readiness(self) -> dict[str, Any]:
        """/readyz's body: whether requests can be served, by which models, and which failed to load."""
        ready = await self.__is_ready__()
        return {"ready": ready, "models": list(self.engine.infos), "failed": self.engine.failed}

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

    @staticmethod
    async def _answer(work: Callable[[], Awaitable[T]], shape: ErrorShape = "openai") -> T:
        """The route's answer, or its error in the route's shape; either way counted in the metrics. `work`
        is called here, so that an adapter's refusal of its own body is answered like any other."""
        trace = RequestTrace()
        token = TRACE.set(trace)
        try:
            answer = await work()
            trace.finish(200)
            return answer
        except errors.EmbentoError as exc:
            response = error_response(exc, shape)
            trace.finish(response.status_code)
            return response  # type: ignore[return-value]
        except Exception:  # a bug: BentoML answers 500
            trace.finish(500)
            raise
        finally:
            TRACE.reset(token)

    async def _embed(self, request: EmbeddingRequest, capability: str = "embed", output_types: list[str] | None = None,
                     shapes: frozenset[Shape] = ALL_SHAPES) -> Embeddings:
        """The one embedding path of every wire format; `output_types` (Cohere's `embedding_types`) and the
        output shapes the format can answer are checked before any work is done."""
        info = await self.engine.require_model(request.model, capability)
        check_output_types(info, output_types or [request.encoding_format], self.engine.quantization.get(
            info.served_model_name), "embedding_types" if output_types else "encoding_format", shapes)
        return await self.engine.embed(request, info)

    # OpenAI and infinity
    @bentoml.api(route="/v1/embeddings")
    async def embeddings(self, request: EmbeddingRequest, /) -> EmbeddingResponse:
        """OpenAI-compatible embeddings."""
        return await self._answer(lambda: _then(self._embed(request), embedding_response))

    @bentoml.api(route="/embeddings")
    async def embeddings_unversioned(self, request: EmbeddingRequest, /) -> EmbeddingResponse:
        """The same, at infinity's path."""
        return await self._answer(lambda: _then(self._embed(request), embedding_response))

    @bentoml.api(route="/embeddings_image")
    async def embeddings_image(self, request: LegacyMediaRequest, /) -> EmbeddingResponse:
        """infinity's legacy image route: `input` is data URIs or URLs."""
        return await self._answer(lambda: _then(self._embed(request.as_embedding_request("image")),
                                                embedding_response))

    @bentoml.api(route="/embeddings_audio")
    async def embeddings_audio(self, request: LegacyMediaRequest, /) -> EmbeddingResponse:
        """infinity's legacy audio route: `input` is data URIs or URLs."""
        return await self._answer(lambda: _then(self._embed(request.as_embedding_request("audio")),
                                                embedding_response))

    @bentoml.api(route="/v1/rerank")
    async def rerank_v1(self, request: RerankRequest, /) -> RerankResponse:
        """Cohere v1 and Jina rerank: documents come back as `{"text": ...}`."""
        shape = functools.partial(rerank_response, return_documents=request.return_documents)
        return await self._answer(lambda: _then(self.engine.rerank(request), shape))

    @bentoml.api(route="/v2/rerank")
    async def rerank_v2(self, request: CohereV2RerankRequest, /) -> CohereV2RerankResponse:
        """Cohere v2 rerank: indices and scores only."""
        return await self._answer(lambda: _then(self.engine.rerank(request), cohere_v2_rerank_response))

    @bentoml.api(route="/rerank")
    async def rerank(self, request: RerankBody, /) -> InfinityRerankResponse:
        """infinity's rerank (`documents`: documents come back as plain strings), or TEI's (`texts`: TEI's bare
        list, and TEI's error shape)."""
        async def rerank() -> Any:
            tei = request.is_tei()
            ranking = await self.engine.rerank(request.as_rerank_request())
            if tei:
                return JSONResponse(rerank_answer(ranking, request.return_text))
            return infinity_rerank_response(ranking, request.return_documents)

        return await self._answer(rerank, "tei" if tei_rerank_body(vars(request)) else "openai")

    @bentoml.api(route="/v1/classify")
    async def classify(self, request: ClassifyRequest, /) -> ClassifyResponse:
        """infinity's classify: every label's score per input."""
        return await self._answer(lambda: self._classify(request))

    @bentoml.api(route="/classify")
    async def classify_unversioned(self, request: ClassifyRequest, /) -> ClassifyResponse:
        """The same, at infinity's path."""
        return await self._answer(lambda: self._classify(request))

    async def _classify(self, request: ClassifyRequest) -> ClassifyResponse:
        info = await self.engine.require_model(request.model, "classify")
        texts = validated_texts(request, CONFIG.max_client_batch_size, CONFIG.max_item_chars)
        result = await self.engine.classify(info, texts, None, request.truncation(),
                                            "identity" if request.raw_scores else None)
        return classify_response(info.served_model_name, info.labels, result.scores.tolist(), result.tokens)

    # Cohere
    @bentoml.api(route="/v1/embed")
    async def cohere_embed_v1(self, request: CohereEmbedRequest, /) -> dict:
        """Cohere v1 embed: float vectors, or by type (int8, uint8, binary, ubinary, base64)."""
        return await self._answer(lambda: self._cohere_embed(request, cohere_v1_response))

    @bentoml.api(route="/v2/embed")
    async def cohere_embed_v2(self, request: CohereV2EmbedRequest, /) -> dict:
        """Cohere v2 embed: texts, images or content inputs, by type."""
        return await self._answer(lambda: self._cohere_embed(request, cohere_v2_response))

    async def _cohere_embed(self, request: C, respond: Callable[[Embeddings, C], dict]) -> dict:
        embeddings = await self._embed(request.as_embedding_request(), output_types=request.output_types(),
                                       shapes=COHERE_EMBED_SHAPES)
        return respond(embeddings, request)

    # TEI
    @bentoml.api(route="/embed")
    async def tei_embed(self, request: TeiEmbedRequest, /) -> list:
        """TEI's embed: a bare list of vectors."""
        return await self._answer(lambda: _then(self._embed(request.as_embedding_request(), shapes=TEI_EMBED_SHAPES),
                                                embed_answer), "tei")

    @bentoml.api(route="/embed_sparse")
    async def embed_sparse(self, request: SparseEmbeddingRequest, /) -> list[list[SparseValue]]:
        """TEI's sparse route: per input, its active vocabulary entries as `{"index", "value"}`."""
        return await self._answer(
            lambda: _then(self._embed(request.as_embedding_request(), "embed_sparse"), sparse_answer), "tei")

    @bentoml.api(route="/predict")
    async def tei_predict(self, request: TeiPredictRequest, /) -> list:
        """TEI's predict: every label's score for a text or a pair, or for each in a batch."""
        return await self._answer(lambda: self._predict(request), "tei")

    async def _predict(self, request: TeiPredictRequest, top_k: int | None = None,
                       activation: Activation | None = None) -> list:
        info = await self.engine.require_model(request.model, "classify")
        firsts, seconds, batch = request.sequences()
        checked_texts(firsts, CONFIG.max_client_batch_size, CONFIG.max_item_chars, "inputs")
        check_text_lengths([second for second in seconds if second], CONFIG.max_item_chars, "inputs")
        result = await self.engine.classify(info, firsts, seconds, request.truncation(),
                                            "identity" if request.raw_scores else activation)
        answers = label_scores(result, top_k)
        return answers if batch else answers[0]

    @bentoml.api(route="/similarity")
    async def tei_similarity(self, request: TeiSimilarityRequest, /) -> list[float]:
        """TEI's (and the sentence-similarity task's) cosine of a sentence with each of the others."""
        return await self._answer(lambda: _then(self._embed(request.as_embedding_request()), similarity_answer),
                                  "tei")

    @bentoml.api(route="/tokenize")
    async def tei_tokenize(self, request: TeiTokenizeRequest, /) -> list[list[dict]]:
        """TEI's tokenize: per input, each token's id, text, whether it is special and its character offsets."""
        async def tokenize() -> list[list[dict]]:
            tokenizer = await self.engine.require_tokenizer(request.model)
            texts = checked_texts(request.texts(), CONFIG.max_client_batch_size, CONFIG.max_item_chars, "inputs")
            prompt = tokenizer.prompt(request.prompt_name)
            return tokens_answer([tokenizer.tokens(prompt + text, request.add_special_tokens) for text in texts])

        return await self._answer(tokenize, "tei")

    @bentoml.api(route="/decode")
    async def tei_decode(self, request: TeiDecodeRequest, /) -> list[str]:
        """TEI's decode: token ids back to text."""
        async def decode() -> list[str]:
            tokenizer = await self.engine.require_tokenizer(request.model)
            return tokenizer.decode(request.sequences(), request.skip_special_tokens)

        return await self._answer(decode, "tei")

    @bentoml.api(route="/")
    async def tei_root(self, request: TeiRootRequest, /) -> Any:
        """TEI's root, as `huggingface_hub.InferenceClient(base_url)` calls it: the task is told by the body,
        else by the kind of the model asked for (or the first served)."""
        return await self._answer(lambda: self._root(request), "tei")

    async def _root(self, request: TeiRootRequest) -> Any:
        body = request.body()
        default = request.model or next(iter(KINDS))
        task = request.task(KINDS.get(default, "embed"))
        if task == "rerank":
            ranking = await self.engine.rerank(parsed(RerankBody, body).as_rerank_request())
            return JSONResponse(rerank_answer(ranking, bool(body.get("return_text"))))
        if task == "similarity":
            return similarity_answer(await self._embed(parsed(TeiSimilarityRequest, body).as_embedding_request()))
        if task == "text-classification":
            parameters = parsed(TextClassificationParameters, body.pop("parameters") or {})
            predict = parsed(TeiPredictRequest, body)
            answer = await self._predict(predict, parameters.top_k, parameters.activation())
            return answer if predict.sequences()[2] else [answer]  # the task's shape: one list per input
        if task == "predict":
            return await self._predict(parsed(TeiPredictRequest, body))
        if task == "embed_sparse":
            sparse = parsed(SparseEmbeddingRequest, body).as_embedding_request()
            return sparse_answer(await self._embed(sparse, "embed_sparse"))
        return embed_answer(await self._embed(parsed(TeiEmbedRequest, body).as_embedding_request(),
                                              shapes=TEI_EMBED_SHAPES))

    # Models and health
    async def model_list(self) -> ModelList:
        if not self.warmup.done:
            raise errors.NotReady("models are still loading; retry shortly")
        return ModelList(data=[
            ModelCard(id=i.served_model_name, created=STARTED, modalities=i.modalities, capabilities=i.capabilities,
                      backend=i.backend, dimension=i.dimension, max_input_tokens=i.max_input_tokens,
                      multi_vector=i.multi_vector, sparse=i.sparse, labels=i.labels if i.kind == "classify" else None,
                      quantization=self._quantization_report(i))
            for i in self.engine.infos.values()
        ], failed=[FailedModel(id=name, error=reason) for name, reason in self.engine.failed.items()])

    def _quantization_report(self, info: ModelInfo) -> dict | None:
        ranges = self.engine.quantization.get(info.served_model_name)
        return ranges.report(info.dimension, info.normalized) if ranges else None

    async def health(self) -> dict[str, float]:
        """infinity's /health, but honest: 200 only while every model is warm and its service answers."""
        if not self.warmup.done:
            raise errors.NotReady("models are not ready")
        if (silent := await self._model_services_answer()) is not None:
            raise errors.NotReady(f"the {silent} service is not ready")
        return {"unix": time.time()}


async def _then(work: Awaitable[Any], shape: Callable[[Any], T]) -> T:
    """The internal result of `work`, written in a route's wire format."""
    return shape(await work)


exit_nonzero_after_failed_start()
remove_server_files()
SERVICES = [Gateway, *(dependency.on for dependency in Gateway.dependencies.values())]
check_served_bento({service.name for service in SERVICES})
for service in SERVICES:
    fix_media_types(service)
routes.router.routes.extend(get_routes(CONFIG, KINDS))

# Added first = outermost. The readiness report is the probe's body itself, so it stands outside the
# error rewriting; every other error below, ours or the framework's, leaves in its route's shape.
Gateway.add_asgi_middleware(ReadinessReport)
Gateway.add_asgi_middleware(ErrorBodies, tei_paths=TEI_PATHS, tei_bodies={"/rerank": tei_rerank_body})
Gateway.add_asgi_middleware(
    RequestGuard, api_keys=CONFIG.api_keys(), max_request_bytes=CONFIG.max_request_bytes,
    open_paths=PROBE_PATHS | ({"/metrics"} if CONFIG.public_metrics else set()),
    max_concurrent_requests=CONFIG.max_concurrent_requests, counters=COUNTERS,
)
Gateway.add_asgi_middleware(WatchDisconnect)
