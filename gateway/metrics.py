"""The gateway's Prometheus metrics (on `/metrics`, with BentoML's and the model services' own).

Per model: requests by status, inputs, tokens and latency by stage. Per model service: work waiting,
requests refused and requests abandoned. Labels hold only served model and service names, never text
from a request, so a client cannot grow the series without bound.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field

import bentoml

from gateway.queue.priority import JOB_CLASSES

NO_MODEL = "none"  # a request refused before a served model was chosen
# Seconds; a request's stages range from a cached tokenization to minutes of queue under overload.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    120.0,
    float("inf"),
)

REQUESTS = bentoml.metrics.Counter(
    name="embento_requests",
    documentation="Requests answered, by served model and HTTP status",
    labelnames=["model", "status"],
)
ALIAS_REQUESTS = bentoml.metrics.Counter(
    name="embento_alias_requests",
    documentation="Requests that named a model by an alias, by alias and the model it named then",
    labelnames=["alias", "model"],
)
INPUTS = bentoml.metrics.Counter(
    name="embento_request_inputs",
    documentation="Inputs (texts, images, audio clips, documents) in requests",
    labelnames=["model"],
)
TOKENS = bentoml.metrics.Counter(
    name="embento_request_tokens",
    documentation="Tokens (or media positions) in requests, after truncation",
    labelnames=["model"],
)
STAGE_SECONDS = bentoml.metrics.Histogram(
    name="embento_stage_seconds",
    documentation="Request latency by stage: preprocess (validate, tokenize, decode), model_service (queue "
    "and inference), postprocess (scores and response), total",
    labelnames=["model", "stage"],
    buckets=LATENCY_BUCKETS,
)
QUEUED_ITEMS = bentoml.metrics.Gauge(
    name="embento_queued_items",
    documentation="Inputs sent to a model service and not yet answered",
    labelnames=["model_service"],
)
QUEUED_TOKENS = bentoml.metrics.Gauge(
    name="embento_queued_tokens",
    documentation="Tokens (or media positions) sent to a model service and not yet answered",
    labelnames=["model_service"],
)
QUEUED_BY_CLASS = bentoml.metrics.Gauge(
    name="embento_queued_items_by_class",
    documentation="Inputs of bulk jobs (job_class=batch) sent to a model service and not yet answered; the "
    "interactive ones are embento_queued_items",
    labelnames=["model_service", "job_class"],
    multiprocess_mode="livesum",
)
# Buckets around the live-query promise: a query waits one pass time budget at most (30 ms on CPU, 10 on a GPU).
QUEUE_WAIT = bentoml.metrics.Histogram(
    name="embento_queue_wait_seconds",
    documentation="How long a request waited in the gateway before its first rows left for a model service, by "
    "class: live (queries), indexing (other online requests), batch (bulk-job lines); gateway/queue/priority.py",
    labelnames=["model_service", "job_class"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, float("inf")),
)
REJECTED = bentoml.metrics.Counter(
    name="embento_rejected_requests",
    documentation="Requests refused before reaching a model service",
    labelnames=["model_service", "reason"],
)
REQUESTS_PER_CALL = bentoml.metrics.Histogram(
    name="embento_requests_per_call",
    documentation="Requests that left together in one model-service call (gateway/queue/coalesce.py)",
    labelnames=["model_service"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, float("inf")),
)
READY = bentoml.metrics.Gauge(
    name="embento_ready",
    documentation="1 when the server's last readiness check (a /readyz, or the end of warm-up) found it ready, else 0",
    multiprocess_mode="livemostrecent",
)
# The queue bounds, so that a dashboard or an alert can compare the queues with them.
MAX_QUEUED_ITEMS = bentoml.metrics.Gauge(
    name="embento_max_queued_items",
    documentation="max_queued_items: the inputs one model service may have waiting",
    multiprocess_mode="livemax",
)
MAX_QUEUED_TOKENS = bentoml.metrics.Gauge(
    name="embento_max_queued_tokens",
    documentation="max_queued_tokens: the tokens one model service may have waiting",
    multiprocess_mode="livemax",
)
RESENT_CALLS = bentoml.metrics.Counter(
    name="embento_model_call_resends",
    documentation="Model-service calls sent again because no answer came in time (a replica that stopped "
    "answering; gateway/queue/resend.py)",
    labelnames=["model_service"],
)
ABANDONED = bentoml.metrics.Counter(
    name="embento_abandoned_requests",
    documentation="Requests given up while a model service had them (deadline or disconnect); their queued "
    "rows are dropped there",
    labelnames=["model_service", "reason"],
)
# The embedding cache (gateway/cache/): by tier, `memory` (each worker's) or `redis` (shared).
CACHE_HITS = bentoml.metrics.Counter(
    name="embento_cache_hits",
    documentation="Inputs answered from the embedding cache, by model and tier",
    labelnames=["model", "tier"],
)
CACHE_MISSES = bentoml.metrics.Counter(
    name="embento_cache_misses",
    documentation="Inputs looked up in a cache tier and not found there",
    labelnames=["model", "tier"],
)
CACHE_ERRORS = bentoml.metrics.Counter(
    name="embento_cache_errors",
    documentation="Cache tier failures (Redis down, slow past its timeout, or a "
    "value that does not read back): the inputs were computed",
    labelnames=["model", "tier"],
)
CACHE_BYTES = bentoml.metrics.Gauge(
    name="embento_cache_bytes",
    documentation="Bytes the memory tier holds, summed over gateway workers",
    labelnames=["tier"],
    multiprocess_mode="livesum",
)
CACHE_LOOKUP_SECONDS = bentoml.metrics.Histogram(
    name="embento_cache_lookup_seconds",
    documentation="One request's lookup in a cache tier",
    labelnames=["tier"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, float("inf")),
)


def start_series(model_services: list[str], max_queued_items: int, max_queued_tokens: int) -> None:
    """The queue bounds, and the refusal, abandon and resend counters of every model service at zero before the
    first one: a rate or an alert over them then has a series to read from the start."""
    MAX_QUEUED_ITEMS.set(max_queued_items)
    MAX_QUEUED_TOKENS.set(max_queued_tokens)
    REJECTED.labels(model_service="gateway", reason="concurrency")
    for name in model_services:
        REJECTED.labels(model_service=name, reason="queue_full")
        for reason in ("deadline", "disconnect"):
            ABANDONED.labels(model_service=name, reason=reason)
        QUEUED_BY_CLASS.labels(model_service=name, job_class="batch")
        for job_class in JOB_CLASSES:
            QUEUE_WAIT.labels(model_service=name, job_class=job_class)
        RESENT_CALLS.labels(model_service=name)


@dataclass
class Account:
    """One request's use as its tenant is charged and its access logged (gateway/tenants/usage.py): filled in when
    it is answered."""

    tenant: str | None  # None: a request without a valid key
    started: float = field(default_factory=time.perf_counter)
    model: str = NO_MODEL
    alias: str | None = None  # the alias the request named the model by
    tokens: int = 0


# Set by the tenant gate for the request it lets through.
ACCOUNT: ContextVar[Account | None] = ContextVar("embento_account", default=None)


@dataclass
class RequestTrace:
    """One request's way through the gateway, recorded as it goes and observed once at the end."""

    started: float = field(default_factory=time.perf_counter)
    recorded: bool = True  # false for a bulk job's lines, which have metrics of their own (gateway/jobs/metrics.py)
    model: str = NO_MODEL
    alias: str | None = None  # the alias the request named `model` by (gateway/served/requests.py)
    sent: float | None = None  # rows handed to the model service
    answered: float | None = None  # its outputs back
    usage_tokens: int = 0  # as the answer's `usage` counts them (the cache's hits included)

    def sending(self, inputs: int, tokens: int) -> None:
        self.sent = time.perf_counter()
        if not self.recorded:
            return
        INPUTS.labels(model=self.model).inc(inputs)
        TOKENS.labels(model=self.model).inc(tokens)

    def finish(self, status: int) -> None:
        if (account := ACCOUNT.get()) is not None:
            account.model, account.alias, account.tokens = self.model, self.alias, self.usage_tokens
        if not self.recorded:
            return
        now = time.perf_counter()
        REQUESTS.labels(model=self.model, status=str(status)).inc()
        if self.alias is not None:
            ALIAS_REQUESTS.labels(alias=self.alias, model=self.model).inc()
        stages = {"total": now - self.started}
        if self.sent is not None:
            stages["preprocess"] = self.sent - self.started
        if self.sent is not None and self.answered is not None:
            stages["model_service"] = self.answered - self.sent
            stages["postprocess"] = now - self.answered
        for stage, seconds in stages.items():
            STAGE_SECONDS.labels(model=self.model, stage=stage).observe(seconds)


TRACE: ContextVar[RequestTrace] = ContextVar("embento_request_trace")


def current_trace() -> RequestTrace:
    """The trace of the request being answered (a detached one outside a request, e.g. warm-up)."""
    trace = TRACE.get(None)
    if trace is None:
        trace = RequestTrace()
        TRACE.set(trace)
    return trace
