"""Who used what: per tenant and model, requests and tokens (`usage` as answered), the requests a limit refused,
and with `log.access: json` one JSON line per request (the probes' aside; a 401's tenant null).
Tenant labels come from the keys file, model labels from the served models: a client cannot grow the series.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable

import bentoml

from config.keys_file import Tenant
from gateway.metrics import Account

TENANT_REQUESTS = bentoml.metrics.Counter(
    name="embento_tenant_requests",
    documentation="Requests answered, by tenant (API key's name), model and status",
    labelnames=["tenant", "model", "status"],
)
TENANT_TOKENS = bentoml.metrics.Counter(
    name="embento_tenant_tokens",
    documentation="Tokens answered (as `usage` counts them), by tenant and model",
    labelnames=["tenant", "model"],
)
THROTTLED = bentoml.metrics.Counter(
    name="embento_tenant_throttled",
    documentation="Requests refused by their tenant's limits, by the limit (requests, tokens, concurrency)",
    labelnames=["tenant", "limit"],
)
LIMIT_STORE_ERRORS = bentoml.metrics.Counter(
    name="embento_limit_store_errors",
    documentation="Times the Redis of the tenants' limits could not count a "
    "request (limits.on_store_error says what happened to it)",
)


class AccessLog:
    """JSON lines on standard output, one per request, when enabled."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._logger = logging.getLogger("embento.access")
        if enabled and not self._logger.handlers:
            handler = logging.StreamHandler(sys.stdout)
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._logger.addHandler(handler)
            self._logger.setLevel(logging.INFO)
            self._logger.propagate = False

    def write(self, account: Account, method: str, path: str, status: int) -> None:
        if not self.enabled:
            return
        self._logger.info(
            json.dumps(
                {
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "tenant": account.tenant,
                    "method": method,
                    "route": path,
                    "model": account.model,
                    **({"alias": account.alias} if account.alias else {}),
                    "tokens": account.tokens,
                    "status": status,
                    "duration_ms": round((time.perf_counter() - account.started) * 1000, 2),
                }
            )
        )


def start_series(tenants: Iterable[Tenant]) -> None:
    """Each limited tenant's throttled counters at zero, so that a rate or an alert over them reads from the start."""
    for tenant in tenants:
        limits = {
            "requests": tenant.requests_per_minute,
            "tokens": tenant.tokens_per_minute,
            "concurrency": tenant.max_concurrent_requests,
        }
        for limit, value in limits.items():
            if value is not None:
                THROTTLED.labels(tenant=tenant.name, limit=limit)


def record(tenant: Tenant, account: Account, status: int) -> None:
    TENANT_REQUESTS.labels(tenant=tenant.name, model=account.model, status=str(status)).inc()
    if account.tokens:
        TENANT_TOKENS.labels(tenant=tenant.name, model=account.model).inc(account.tokens)
