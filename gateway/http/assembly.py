"""What a gateway worker is made of, in the order it is made. service.py declares the BentoML service (its routes,
its model services, its settings) and calls these four steps; everything the routes run on is built here.

1. Per process, at import (`gateway_process` → `GatewayProcess`): the counters shared across gateway workers, the
   models at run time (`ServedModels`, their one owner), readiness (`Lifecycle`), the tenants' keys and the job
   store. The GET and admin routes hold them from import, before a worker runs.
2. Around the routes (`install`): the GET, admin and job routes beside BentoML's, and the middleware, outermost
   first.
3. Per worker, in `Gateway.__init__` (`gateway_worker` → `GatewayWorker`): torch kept out unless a kind needs it,
   the preprocessors, the calls to the model services, the cache, the URL fetcher, the engine, warm-up and the job
   worker.
4. At the worker's start (`start_worker`): readiness, the start's warm-up and then the models at run time, the job
   worker.

What comes from the packaging side (the workers' count, the load-failure policy, the dispatcher's rows, stopping
the server) is handed in by service.py: the gateway imports neither `bento/` nor `runners/`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette

from config.settings import EmbentoConfig
from gateway.cache.policy import CacheControl
from gateway.cache.tiers import EmbeddingCache
from gateway.engine import Engine
from gateway.http.admin import admin_routes, with_admin_routes
from gateway.http.errors import ERROR_SHAPES, TEI_BODIES, ErrorBodies
from gateway.http.get_routes import ReadinessReport, get_routes
from gateway.http.guard import IN_FLIGHT, RequestGuard
from gateway.http.job_routes import job_routes
from gateway.http.openapi import OpenApiDocument, with_embento_info
from gateway.inputs.fetch import UrlFetcher, UrlPolicy
from gateway.inputs.preprocessors import LoadAll, load_preprocessors
from gateway.jobs.store import JobStore, open_store
from gateway.jobs.worker import JobWorker
from gateway.queue.admission import admission_counters
from gateway.queue.coalesce import batch_call_counter
from gateway.queue.deadline import WatchDisconnect
from gateway.queue.model_calls import ModelCalls
from gateway.served.models import ServedModels
from gateway.served.warmup import Warming
from gateway.shared_memory import SharedCounters
from gateway.startup.lifecycle import WARM_WORKERS, Lifecycle
from gateway.tenants.gate import PROBE_PATHS, TenantGate
from gateway.tenants.keys import Keys
from gateway.tenants.ledger import Ledger, SharedMemoryLedger
from gateway.tenants.redis_ledger import RedisLedger
from gateway.tenants.usage import AccessLog
from gateway.wire.batches import FILES_PATH, upload_limit
from models.base import Kind
from models.kinds import gateway_needs_torch, model_kind, spec
from server_state.kept_models import server_model_set


@dataclass(frozen=True)
class GatewayProcess:
    """What one gateway process holds from import: the routes outside BentoML's reach these before any worker runs."""

    config: EmbentoConfig
    kinds: dict[str, Kind]  # served name -> kind, in configuration order (the first capable model is the default)
    model_services: list[str]  # the model services the kinds name, each a `bentoml.depends` of the gateway
    counters: SharedCounters
    served: ServedModels
    lifecycle: Lifecycle
    keys: Keys
    job_store: JobStore | None  # None with jobs off
    new_jobs: asyncio.Event  # set by POST /v1/batches, awaited by this process's job worker


def gateway_process(config: EmbentoConfig, workers: Callable[[], int]) -> GatewayProcess:
    """Step 1. `workers`: how many gateway workers the server runs (asked once one serves)."""
    kinds = {m.served_model_name: model_kind(m) for m in config.models}
    model_services = list(dict.fromkeys(spec(kind).model_service for kind in kinds.values()))
    counters = _shared_counters(model_services)
    served = ServedModels(config, workers)
    lifecycle = Lifecycle(served.registry, counters, workers, served.states.names, served.requests.servable)
    return GatewayProcess(
        config=config,
        kinds=kinds,
        model_services=model_services,
        counters=counters,
        served=served,
        lifecycle=lifecycle,
        keys=_tenant_keys(config),  # read now: a bad keys file stops the server at start
        job_store=open_store(config.jobs),
        new_jobs=asyncio.Event(),
    )


def install(gateway: Any, routes: Starlette, process: GatewayProcess) -> None:
    """Step 2. Mount the GET routes, the admin routes and, with jobs on, the Files and Batches routes on `routes`
    (the Gateway's ASGI app), and add the middleware, outermost first. The readiness report is the probe's body
    itself, so it stands outside the error rewriting; every other error below, ours or the framework's, leaves in
    its route's shape."""
    config, job_store = process.config, process.job_store
    routes.router.routes.extend(get_routes(config, process.lifecycle, process.served))
    routes.router.routes.extend(admin_routes(config, process.served.admin, process.served.additions, process.keys))
    if job_store is not None:
        routes.router.routes.extend(job_routes(job_store, config.jobs, process.new_jobs.set))
    uploads = {FILES_PATH: upload_limit(config.jobs)} if job_store is not None else {}
    gateway.add_asgi_middleware(ReadinessReport, lifecycle=process.lifecycle)
    gateway.add_asgi_middleware(OpenApiDocument, edits=(with_admin_routes, with_embento_info))
    gateway.add_asgi_middleware(ErrorBodies, shapes=ERROR_SHAPES, tei_bodies=TEI_BODIES)
    gateway.add_asgi_middleware(
        TenantGate,
        keys=process.keys,
        ledger=_ledger(config),
        open_paths=PROBE_PATHS | ({"/metrics"} if config.public_metrics else set()),
        access_log=AccessLog(config.log.access == "json"),
    )
    gateway.add_asgi_middleware(
        RequestGuard,
        max_request_bytes=config.max_request_bytes,
        max_concurrent_requests=config.max_concurrent_requests,
        counters=process.counters,
        upload_paths=uploads,
    )
    gateway.add_asgi_middleware(WatchDisconnect)
    gateway.add_asgi_middleware(CacheControl)


@dataclass(frozen=True)
class GatewayWorker:
    """What one gateway worker runs the routes on."""

    engine: Engine
    warming: Warming
    jobs: JobWorker | None
    clients: Mapping[str, Any]  # model service name -> its client
    failed_here: dict[str, str]  # served name -> why its preprocessor failed to load here (`allow_partial`)


def gateway_worker(
    process: GatewayProcess, clients: Mapping[str, Any], load_all: LoadAll, dispatch_rows: int
) -> GatewayWorker:
    """Step 3, in the worker. `load_all`: the load-failure policy; `dispatch_rows`: the most rows BentoML's
    dispatcher sends a model service in one call."""
    config = process.config
    _without_torch_unless_needed(process.kinds.values())
    process.counters.open()  # now, in the worker: a worker restarted after a crash frees what it held at once
    preprocessors, failed_here = load_preprocessors(config, process.kinds, load_all)
    calls = ModelCalls(config, process.kinds.values(), clients, dispatch_rows, process.counters)
    cache = EmbeddingCache(config.cache)
    served = process.served
    engine = Engine(config, served.registry, calls, preprocessors, _url_fetcher(config), cache, served.requests)
    warming = Warming(calls, preprocessors, cache, engine.limits, served.wanted.settings)
    jobs = None
    if process.job_store is not None:
        jobs = JobWorker(
            process.job_store, config.jobs, engine, process.lifecycle.is_ready, process.new_jobs, process.keys
        )
    return GatewayWorker(engine, warming, jobs, clients, failed_here)


def start_worker(process: GatewayProcess, worker: GatewayWorker, stop_server: Callable[[str], None]) -> None:
    """Step 4, on the worker's event loop: readiness; the start's warm-up, then the models loaded and unloaded at
    run time; the job worker, whose work waits until the models serve."""
    process.lifecycle.start(worker.clients)
    process.served.start(
        worker.warming,
        worker.clients,
        worker.failed_here,
        stop_server,
        server_model_set(process.config),
        process.lifecycle.is_ready,
    )
    if worker.jobs is not None:
        worker.jobs.start()


def http_settings(config: EmbentoConfig) -> dict[str, Any]:
    """The gateway's BentoML `http` settings: CORS, for the origins configured."""
    return {
        "cors": {
            "enabled": bool(config.cors_allow_origins),
            "access_control_allow_origins": config.cors_allow_origins,
            "access_control_allow_methods": ["GET", "POST", "DELETE", "OPTIONS"],
            "access_control_allow_headers": ["Authorization", "Content-Type", "Cache-Control"],
        }
    }


def _tenant_keys(config: EmbentoConfig) -> Keys:
    """The API keys and their tenants, and the admin key."""
    admin_key = config.admin_key.get_secret_value() if config.admin_key else None
    return Keys(config.api_keys(), config.auth.keys_file, admin_key=admin_key)


def _ledger(config: EmbentoConfig) -> Ledger:
    """Where the tenants' limits are counted: Redis for every replica, else shared memory for this server."""
    limits = config.limits
    if (url := limits.redis()) is None:
        return SharedMemoryLedger()
    return RedisLedger(
        url,
        limits.redis_timeout_ms / 1000,
        lease_s=config.request_timeout_s + 60,
        fail_open=limits.on_store_error == "open",
    )


def _shared_counters(model_services: Iterable[str]) -> SharedCounters:
    """Requests in flight, the work queued and the bulk-job call in flight per model service, and the workers warm,
    counted for the server across gateway workers."""
    return SharedCounters(
        [
            IN_FLIGHT,
            WARM_WORKERS,
            *(
                name
                for service in model_services
                for name in (*admission_counters(service), batch_call_counter(service))
            ),
        ]
    )


def _url_fetcher(config: EmbentoConfig) -> UrlFetcher | None:
    """The fetcher of http(s) inputs, when they are allowed."""
    if not config.allow_url_inputs:
        return None
    return UrlFetcher(
        UrlPolicy(
            allow_private=config.allow_private_urls,
            allowed_networks=tuple(ipaddress.ip_network(n, strict=False) for n in config.url_allow_networks),
            timeout_s=config.url_timeout_s,
            max_bytes=config.max_item_bytes,
        )
    )


def _without_torch_unless_needed(kinds: Iterable[Kind]) -> None:
    """Before the worker's preprocessors load: transformers imports torch (and scipy, sklearn) whenever it can, 460
    MiB of RSS in a process that only tokenizes and resizes (125 MiB without). transformers 5 reads no setting for
    it, only whether `torch` can be found: an entry of None in `sys.modules` is Python's own way to say it cannot.
    CLAP's and ColPali's processors need torch (models/kinds.py)."""
    if gateway_needs_torch(kinds):
        return
    # typeshed's sys.modules holds modules only; None there is the import system's documented "not found".
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    # transformers then says "PyTorch was not found. Models won't be available ...": here that is the intent,
    # not a failure, and it would be a newcomer's first alarming line.
    logging.getLogger("transformers").addFilter(
        lambda record: not record.getMessage().startswith("PyTorch was not found")
    )
