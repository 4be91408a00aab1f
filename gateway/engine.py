"""The gateway's core: one internal request per operation (embed, rank, classify, tokenize) turned into rows,
sent to the model service of the model's kind, and answered as internal results (`Embeddings`, `Ranking`,
`Classified`). The internal requests are `EmbeddingRequest` and `RerankRequest`, which carry every client's
controls; each wire format (OpenAI, infinity, Cohere, Jina, TEI) is an adapter onto them and from the results.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import bentoml
import numpy as np

from gateway.admission import Admission
from gateway.coalesce import Coalescer
from gateway.deadline import until_done
from gateway.embeddings import Embeddings
from gateway.fetch import UrlFetcher
from gateway.media_inputs import load_item
from gateway.metrics import ABANDONED, REQUESTS_PER_CALL, current_trace, start_series
from gateway.routing import check_modalities, choose_model
from gateway.schemas import EmbeddingRequest, InputItem, validated_inputs
from gateway.scoring import Ranking, RerankRequest, validated_documents
from gateway.shared import SharedCounters, agreed
from gateway.warmup import Warmup
from models import errors
from models.base import Kind, ModelInfo, ModelInput, Row, TokenizedText, Truncation
from config.settings import EmbentoConfig
from models.media import MediaLimits
from models.media_processor import MediaProcessor
from models.quantization import CALIBRATION_TEXTS, Quantizer, read_configured_ranges
from models.scores import Activation, activate, late_interaction, rank
from models.text_tokenizer import TextTokenizer
from shared_metrics import DROPPED_INPUTS

logger = logging.getLogger(__name__)
T = TypeVar("T")
CANCEL_TIMEOUT_S = 5
CALIBRATION_CHUNK = 16  # rows per call: the same batches at every start, so the same vectors
GPU_CALLS_IN_FLIGHT = 2
INLINE_TOKENIZE_LIMIT = 2048  # characters (or token ids) per request


@dataclass(frozen=True)
class ModelService:
    """Where rows of one kind go: the Gateway attribute holding the service, its name, its batchable API."""

    attribute: str
    name: str
    api: str


@dataclass(frozen=True)
class Classified:
    """Every label's score per input, and the tokens spent."""

    info: ModelInfo
    scores: np.ndarray  # (inputs, labels)
    tokens: int


class Engine:
    """Internal requests through the model services. `service_proxy(attribute)` is the Gateway's dependency."""

    def __init__(self, config: EmbentoConfig, services: Mapping[Kind, ModelService],
                 service_proxy: Callable[[str], Any], warmup: Warmup, tokenizers: dict[str, TextTokenizer],
                 processors: dict[str, MediaProcessor], fetcher: UrlFetcher | None, dispatch_rows: int,
                 counters: SharedCounters | None = None) -> None:
        self.config = config
        self.services = services
        self._proxy = service_proxy
        self.warmup = warmup
        self.tokenizers = tokenizers
        self.processors = processors
        self.fetcher = fetcher
        self.limits = MediaLimits(config.max_item_bytes, config.max_image_pixels, config.max_audio_seconds)
        self.quantization: dict[str, Quantizer] = {}  # filled at warm-up
        self._cancelling: set[asyncio.Task] = set()
        attributes = {service.attribute: service for service in services.values()}
        self.admission = {a: Admission(s.name, config.max_queued_items, config.max_queued_tokens, counters)
                          for a, s in attributes.items()}
        start_series([s.name for s in attributes.values()], config.max_queued_items, config.max_queued_tokens)
        self.coalescers = {
            a: Coalescer(functools.partial(self._call_service, s), dispatch_rows, _count_dropped)
            for a, s in attributes.items()
        }

    @property
    def infos(self) -> dict[str, ModelInfo]:
        """The models served, once warm, in configuration order (the first is the default)."""
        return self.warmup.infos

    @property
    def failed(self) -> dict[str, str]:
        return self.warmup.failed

    def runner(self, kind: Kind) -> Callable[[list[Any]], Awaitable[list[np.ndarray]]]:
        return self.coalescers[self.services[kind].attribute].run

    async def require_model(self, requested: str | None, capability: str | None) -> ModelInfo:
        if not self.warmup.done:
            raise errors.NotReady("models are still loading; retry shortly")
        if requested in self.failed:
            raise errors.ModelUnavailable(f"model '{requested}' failed to load: {self.failed[requested]}",
                                          param="model")
        info = choose_model(self.infos, requested, capability)
        current_trace().model = info.served_model_name
        return info

    def text_tokenizer(self, info: ModelInfo) -> TextTokenizer:
        if info.served_model_name not in self.tokenizers:
            raise errors.InvalidRequest(f"model '{info.served_model_name}' is not a text model", param="model")
        return self.tokenizers[info.served_model_name]

    async def require_tokenizer(self, requested: str | None) -> TextTokenizer:
        """The tokenizer of the named text model, or of the first served one."""
        if requested is None and self.warmup.done:
            requested = next((name for name in self.infos if name in self.tokenizers), None)
            if requested is None:
                raise errors.InvalidRequest("no served model is a text model", param="model")
        return self.text_tokenizer(await self.require_model(requested, "embed" if requested is None else None))

    # Embeddings
    async def embed(self, request: EmbeddingRequest, info: ModelInfo | None = None,
                    capability: str = "embed") -> Embeddings:
        info = info or await self.require_model(request.model, capability)
        config = self.config
        items = validated_inputs(request, info, config.max_client_batch_size, config.max_media_items,
                                 config.max_item_chars)
        check_modalities(self.infos, info, {item.modality for item in items})
        if info.served_model_name in self.tokenizers:
            outputs, tokens = await self._embed_text(info, [item.value for item in items], request)
        else:
            outputs, tokens = await self._embed_media(info, items)
        return Embeddings(info, outputs, tokens, request, self.quantization.get(info.served_model_name))

    async def _embed_text(
        self, info: ModelInfo, inputs: list[str] | list[list[int]], request: EmbeddingRequest
    ) -> tuple[list[np.ndarray], int]:
        tokenizer = self.tokenizers[info.served_model_name]
        prompt_length = 0
        if isinstance(inputs[0], str):
            prompt = tokenizer.prompt(request.prompt_name, request.instruction, request.input_type)
            prompt_length = tokenizer.prompt_length(prompt) if prompt else 0
            work = functools.partial(tokenizer.encode_texts, inputs, prompt, request.truncation())
        else:
            work = functools.partial(tokenizer.encode_ids, inputs, request.truncation())
        token_ids = await off_loop_if_large(work, sum(len(item) for item in inputs))
        rows = TokenizedText.rows(info.served_model_name, token_ids, prompt_length=prompt_length,
                                  normalize=request.normalize)
        return await self.run(info, rows), sum(len(ids) for ids in token_ids)

    async def _embed_media(self, info: ModelInfo, items: list[InputItem]) -> tuple[list[np.ndarray], int]:
        rows = await self._media_rows(info, items)
        return await self.run(info, rows), sum(row.length for row in rows)

    async def _media_rows(self, info: ModelInfo, items: list[InputItem]) -> list[ModelInput]:
        """Fetch or decode every item's bytes, then decode and process them off the event loop."""
        async def payload(index: int, item: InputItem) -> str | bytes:
            if item.modality == "text":
                return item.value  # type: ignore[return-value]
            return await load_item(item.value, self.fetcher, self.config.max_item_bytes, f"input[{index}]")  # type: ignore[arg-type]

        payloads = await asyncio.gather(*(payload(i, item) for i, item in enumerate(items)))
        processor = self.processors[info.served_model_name]
        work = [(item.modality, value) for item, value in zip(items, payloads)]
        return await asyncio.to_thread(processor.encode, info.served_model_name, work, self.limits)

    # Rerank
    async def rerank(self, request: RerankRequest) -> Ranking:
        """Score every (query, document) pair, best first."""
        info = await self.require_model(request.model, "rerank")
        config = self.config
        if info.served_model_name in self.processors:
            documents = validated_documents(request, config.max_media_items, config.max_item_chars,
                                            text_documents=False)
            if request.instruction is not None:
                raise errors.InvalidRequest(f"model '{info.served_model_name}' takes no instruction",
                                            param="instruction")
            scores, tokens = await self._rank_images(info, request.query, documents)
        else:
            documents = validated_documents(request, config.max_client_batch_size, config.max_item_chars,
                                            text_documents=True)
            scores, tokens = await self._rank_texts(info, request, documents)
        return Ranking(model=info.served_model_name, order=rank(scores, request.top_n), scores=scores.tolist(),
                       documents=documents, tokens=tokens)

    async def _rank_texts(self, info: ModelInfo, request: RerankRequest, documents: list[str]
                          ) -> tuple[np.ndarray, int]:
        """A cross-encoder over each (query, document) pair."""
        query = request.query
        work = functools.partial(self.tokenizers[info.served_model_name].encode_pairs, query, documents,
                                 request.instruction, request.truncation())
        token_ids, segments = await off_loop_if_large(work, len(query) * len(documents) + sum(map(len, documents)))
        logits = np.stack(await self.run(info, TokenizedText.rows(info.served_model_name, token_ids, segments)))
        scores = activate(logits, "identity" if request.raw_scores else info.activation)[:, 0]
        return scores, sum(len(ids) for ids in token_ids)

    async def _rank_images(self, info: ModelInfo, query: str, documents: list[str]) -> tuple[np.ndarray, int]:
        """Documents are images (data URIs or URLs): MaxSim late interaction for ColPali, cosine for CLIP."""
        items = [InputItem("text", query)] + [InputItem("image", document) for document in documents]
        rows = await self._media_rows(info, items)
        query_vectors, *pages = await self.run(info, rows)
        if info.multi_vector:
            scores = np.array([late_interaction(query_vectors, page) for page in pages], dtype=np.float32)
        else:
            scores = np.stack(pages) @ query_vectors
        return scores, sum(row.length for row in rows)

    # Classify
    async def classify(self, info: ModelInfo, texts: list[str], pairs: list[str | None] | None,
                       truncation: Truncation, activation: Activation | None) -> Classified:
        """Every label's score for each text, or each (text, pair) where `pairs` gives a second text; the
        model's own activation unless one is given."""
        tokenizer = self.text_tokenizer(info)
        size = sum(map(len, texts)) + sum(len(p or "") for p in pairs or [])
        if pairs is not None and any(second is not None for second in pairs):
            work = functools.partial(tokenizer.encode_pair_list, texts, pairs, truncation)
            token_ids, segments = await off_loop_if_large(work, size)
        else:
            work = functools.partial(tokenizer.encode_texts, texts, "", truncation)
            token_ids, segments = await off_loop_if_large(work, size), None
        logits = np.stack(await self.run(info, TokenizedText.rows(info.served_model_name, token_ids, segments)))
        return Classified(info, activate(logits, activation or info.activation), sum(len(ids) for ids in token_ids))

    # Warm-up
    async def warm_up(self, info: ModelInfo) -> None:
        """One real call through every modality the model serves; raises if it fails or answers the wrong shape.
        Dense single-vector models then get their int8/uint8 scale (or ranges)."""
        outputs = checked(await self.runner(info.kind)(self._warmup_rows(info)))
        if info.device != "cpu":  # see gateway/coalesce.py
            self.coalescers[self.services[info.kind].attribute].max_calls = GPU_CALLS_IN_FLIGHT
        if info.sparse:
            wrong = [o.shape for o in outputs if o.shape[0] != 2 or (o.shape[1] and o[0].max() >= info.dimension)]
        else:
            wrong = [output.shape for output in outputs if output.shape[-1] != info.dimension]
        if wrong:
            raise errors.InferenceError(f"it answered outputs of shape {sorted(set(wrong))}; the model reports "
                                        f"{info.dimension} features")
        if info.kind in ("embed", "clip", "clap") and not info.multi_vector:
            self.quantization[info.served_model_name] = await self._quantizer(info)

    def _warmup_rows(self, info: ModelInfo) -> list[Any]:
        name = info.served_model_name
        if name in self.processors:
            return self.processors[name].warmup_rows(name)
        if info.kind == "rerank":
            return TokenizedText.rows(name, *self.tokenizers[name].encode_pairs("warm-up", ["warm-up"]))
        return TokenizedText.rows(name, self.tokenizers[name].encode_texts(["warm-up"]))

    async def _quantizer(self, info: ModelInfo) -> Quantizer:
        """The model's scheme, with parameters configured, or from the calibration texts embedded in fixed
        chunks, one call at a time."""
        name = info.served_model_name
        settings = self.config.model(name)
        scheme, configured = settings.quantization, settings.quantization_ranges  # type: ignore[union-attr]
        if configured:
            return Quantizer(scheme, configured=read_configured_ranges(configured, info.dimension, scheme))
        vectors, started = [], time.perf_counter()
        for start in range(0, len(CALIBRATION_TEXTS), CALIBRATION_CHUNK):
            texts = CALIBRATION_TEXTS[start:start + CALIBRATION_CHUNK]
            if name in self.tokenizers:
                tokenizer = self.tokenizers[name]
                rows = TokenizedText.rows(name, tokenizer.encode_texts(texts, tokenizer.prompt(None)))
            else:
                rows = self.processors[name].encode(name, [("text", text) for text in texts], self.limits)
            vectors += checked(await self.runner(info.kind)(rows))
        logger.info("model '%s': int8/uint8 %s quantization calibrated on %d texts in %.2f s", name, scheme,
                    len(vectors), time.perf_counter() - started)
        return Quantizer(scheme, calibration=agreed(f"calibration {name}", np.stack(vectors)))

    # Model services
    async def run(self, info: ModelInfo, rows: list[Row]) -> list[np.ndarray]:
        """Rows through the model's service; one output per input row, or a clear error."""
        tokens = sum(row.length for row in rows)
        if tokens > self.config.max_request_tokens:
            raise errors.InvalidRequest(
                f"the request holds {tokens} tokens after truncation; at most {self.config.max_request_tokens} "
                "are allowed", param="input",
            )
        request_id = uuid.uuid4().hex
        for row in rows:
            row.request_id = request_id
        trace = current_trace()
        trace.sending(len(rows), tokens)
        service = self.services[info.kind]
        try:
            with self.admission[service.attribute].admit(len(rows), tokens):
                outputs = await until_done(self.runner(info.kind)(rows), self.config.request_timeout_s)
        except (errors.RequestTimeout, errors.ClientGone) as exc:
            reason = "deadline" if isinstance(exc, errors.RequestTimeout) else "disconnect"
            self._abandon(service, request_id, reason)
            raise
        trace.answered = time.perf_counter()
        return checked(outputs)

    def _abandon(self, service: ModelService, request_id: str, reason: str) -> None:
        """Nobody waits for this request any more: its model service drops whatever of it is still queued."""
        ABANDONED.labels(model_service=service.name, reason=reason).inc()

        async def cancel() -> None:
            try:
                await asyncio.wait_for(self._proxy(service.attribute).to_async.cancel([request_id]), CANCEL_TIMEOUT_S)
            except Exception as exc:  # the rows then run and are thrown away; nothing else is lost
                logger.warning("could not cancel a request on the %s service: %r", service.name, exc)

        task = asyncio.create_task(cancel())
        self._cancelling.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._cancelling.discard)

    async def _call_service(self, service: ModelService, rows: list[Any]) -> list[np.ndarray]:
        """One call to a model service's batchable API (the coalescer's `send`); its failures as our errors.

        One retry when the connection broke: the model service may have closed a kept-alive connection as it
        was reused (bentoml #4971), or restarted. Inference is idempotent, so sending again is safe."""
        call = getattr(self._proxy(service.attribute).to_async, service.api)
        REQUESTS_PER_CALL.labels(model_service=service.name).observe(len({row.request_id for row in rows}))
        try:
            try:
                return await call(rows)
            except aiohttp.ClientConnectionError as exc:
                logger.warning("connection to the %s service broke (%r); sending again", service.attribute, exc)
                return await call(rows)
        except bentoml.exceptions.BentoMLException as exc:
            if exc.error_code.value in (429, 503):
                raise errors.Overloaded("the model service is overloaded; retry later") from exc
            raise errors.InferenceError(f"the model service failed: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise errors.NotReady(f"the model service is unavailable ({type(exc).__name__}); retry shortly") from exc


def checked(outputs: list[np.ndarray]) -> list[np.ndarray]:
    """The outputs, unless the model failed on some input (`services.pool.FAILED`) or answered NaN or inf.
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


async def off_loop_if_large(work: Callable[[], T], size: int) -> T:
    """A thread hop costs more than tokenizing a few sentences; only big inputs leave the event loop."""
    if size <= INLINE_TOKENIZE_LIMIT:
        return work()
    return await asyncio.to_thread(work)
