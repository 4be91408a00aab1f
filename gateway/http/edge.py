"""What surrounds the gateway's routes: the middleware stack, the GET routes, the URL-fetch policy, the counters
shared across gateway workers, and the gateway process's own environment."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import sys
from collections.abc import Iterable
from typing import Any

from starlette.applications import Starlette

from config.settings import EmbentoConfig
from gateway.cache.policy import CacheControl
from gateway.http.admin import admin_routes, with_admin_routes
from gateway.http.errors import ERROR_SHAPES, TEI_BODIES, ErrorBodies
from gateway.http.get_routes import ReadinessReport, get_routes
from gateway.http.guard import IN_FLIGHT, RequestGuard
from gateway.http.job_routes import job_routes
from gateway.http.openapi import OpenApiDocument, with_embento_info
from gateway.inputs.fetch import UrlFetcher, UrlPolicy
from gateway.jobs.store import JobStore
from gateway.queue.admission import admission_counters
from gateway.queue.coalesce import batch_call_counter
from gateway.queue.deadline import WatchDisconnect
from gateway.served.models import ServedModels
from gateway.shared_memory import SharedCounters
from gateway.startup.lifecycle import WARM_WORKERS, Lifecycle
from gateway.tenants.gate import PROBE_PATHS, TenantGate
from gateway.tenants.keys import Keys
from gateway.tenants.ledger import Ledger, SharedMemoryLedger
from gateway.tenants.redis_ledger import RedisLedger
from gateway.tenants.usage import AccessLog
from gateway.wire.batches import FILES_PATH, upload_limit
from models.base import Kind
from models.kinds import gateway_needs_torch


def install(
    gateway: Any,
    routes: Starlette,
    *,
    config: EmbentoConfig,
    lifecycle: Lifecycle,
    served: ServedModels,
    counters: SharedCounters,
    keys: Keys,
    job_store: JobStore | None,
    new_jobs: asyncio.Event,
) -> None:
    """Mount the GET routes, and the Files and Batches routes with jobs on, on `routes` (the Gateway's ASGI app)
    and add the middleware, outermost first. The readiness report is the probe's body itself, so it stands
    outside the error rewriting; every other error below, ours or the framework's, leaves in its route's shape."""
    routes.router.routes.extend(get_routes(config, lifecycle, served))
    routes.router.routes.extend(admin_routes(config, served.admin, served.additions, keys))
    if job_store is not None:
        routes.router.routes.extend(job_routes(job_store, config.jobs, new_jobs.set))
    uploads = {FILES_PATH: upload_limit(config.jobs)} if job_store is not None else {}
    gateway.add_asgi_middleware(ReadinessReport, lifecycle=lifecycle)
    gateway.add_asgi_middleware(OpenApiDocument, edits=(with_admin_routes, with_embento_info))
    gateway.add_asgi_middleware(ErrorBodies, shapes=ERROR_SHAPES, tei_bodies=TEI_BODIES)
    gateway.add_asgi_middleware(
        TenantGate,
        keys=keys,
        ledger=ledger(config),
        open_paths=PROBE_PATHS | ({"/metrics"} if config.public_metrics else set()),
        access_log=AccessLog(config.log.access == "json"),
    )
    gateway.add_asgi_middleware(
        RequestGuard,
        max_request_bytes=config.max_request_bytes,
        max_concurrent_requests=config.max_concurrent_requests,
        counters=counters,
        upload_paths=uploads,
    )
    gateway.add_asgi_middleware(WatchDisconnect)
    gateway.add_asgi_middleware(CacheControl)


def tenant_keys(config: EmbentoConfig) -> Keys:
    """The API keys and their tenants, and the admin key: read now, so that a bad keys file stops the server at
    start."""
    admin_key = config.admin_key.get_secret_value() if config.admin_key else None
    return Keys(config.api_keys(), config.auth.keys_file, admin_key=admin_key)


def ledger(config: EmbentoConfig) -> Ledger:
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


def shared_counters(model_services: Iterable[str]) -> SharedCounters:
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


def url_fetcher(config: EmbentoConfig) -> UrlFetcher | None:
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


def without_torch_unless_needed(kinds: Iterable[Kind]) -> None:
    """In the gateway worker, before its preprocessors load: transformers imports torch (and scipy, sklearn)
    whenever it can, 460 MiB of RSS in a process that only tokenizes and resizes (125 MiB without). transformers 5
    reads no setting for it, only whether `torch` can be found: an entry of None in `sys.modules` is Python's
    own way to say it cannot. CLAP's and ColPali's processors need torch (models/kinds.py)."""
    if gateway_needs_torch(kinds):
        return
    # typeshed's sys.modules holds modules only; None there is the import system's documented "not found".
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    # transformers then says "PyTorch was not found. Models won't be available ...": here that is the intent,
    # not a failure, and it would be a newcomer's first alarming line.
    logging.getLogger("transformers").addFilter(
        lambda record: not record.getMessage().startswith("PyTorch was not found")
    )
