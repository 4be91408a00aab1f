"""The readiness and health the probes report, from the served models' registry (gateway/served/: its reconciler
warms the models up at the start and keeps the registry to what the server holds).

One `Lifecycle` per gateway process, made at import: the GET routes and the /readyz middleware are mounted
then and hold it. The Gateway starts it, since only the Gateway holds the model services' clients.

Readiness is the server's, not the worker's: the kernel hands a connection to any gateway worker, so a server
whose probe one warm worker answered would send the next request to a worker still warming up, which answers
503. Each worker counts itself warm in the counters the workers share, and every worker says ready only once
all of them are: an orchestrator then routes nothing to a replica before each of its workers can answer, and a
worker restarted after a crash takes its replica out of the rotation until it is warm again.

What counts as servable is the served models' one rule (gateway/served/requests.py, `servable`): a model loaded, or one
a request may load (lazy, or evicted). A server with none (every model unloaded by the admin API, or failed) is not
ready, whatever its configuration says.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import aiohttp

from config import errors
from gateway.metrics import READY
from gateway.served.registry import ModelRegistry
from gateway.shared_memory import SharedCounters
from server_state.server_files import mark_gateway_worker

READINESS_TIMEOUT_S = 1
WARM_WORKERS = "warm_workers"  # the shared counter: each gateway worker adds 1 once its models are warm


class Lifecycle:
    """Readiness and health: ready while every model is warm and its service answers."""

    def __init__(
        self,
        registry: ModelRegistry,
        counters: SharedCounters | None = None,
        workers: Callable[[], int] = lambda: 1,
        states: Callable[[], Mapping[str, str]] = dict,
        servable: Callable[[], Collection[str]] | None = None,
    ) -> None:
        """`counters`: the gateway workers' shared counters, with WARM_WORKERS; `workers`: how many gateway workers
        the server runs, each of which must be warm for it to be ready (asked once one is: BentoML resolves its
        configuration in the worker after this is made); `servable`: the models a request may be served by now
        (the served models'; by default the warm ones)."""
        self.registry = registry
        self._states = states  # each model's state, for /readyz (the served models')
        self._servable = servable or (lambda: registry.infos)
        self.clients: Mapping[str, Any] = {}
        self._counters = counters or SharedCounters([WARM_WORKERS])
        self._workers = workers
        self._worker_count = 1
        self._counted_warm = False

    def start(self, clients: Mapping[str, Any]) -> None:
        """In the gateway worker: the model services whose readiness is the server's. Warm-up is the served models'
        (their reconciler's first pass); a probe reads `registry.done` rather than waiting on it."""
        self.clients = clients
        # the model services serve while it runs, when the server stops (bento/serving/patches.py)
        mark_gateway_worker()

    async def is_ready(self) -> bool:
        ready = self._every_worker_warm() and await self._silent_service() is None
        READY.set(int(ready))
        return ready

    def _every_worker_warm(self) -> bool:
        if not (self.registry.done and self._servable()):
            return False
        if not self._counted_warm:
            with self._counters.locked():
                self._counters.add(WARM_WORKERS, 1)
            self._counted_warm = True
            self._worker_count = self._workers()
        return self._counters.total(WARM_WORKERS) >= self._worker_count

    async def readiness(self) -> dict[str, Any]:
        """/readyz's body: whether requests can be served, by which models, which failed to load, and each
        configured model's state (`loaded`, `loading`, `unloaded`, `failed`)."""
        ready = await self.is_ready()
        return {
            "ready": ready,
            "models": list(self.registry.infos),
            "failed": dict(self.registry.failed),
            "states": dict(self._states()),
        }

    async def health(self) -> dict[str, float]:
        """infinity's /health, but honest: 200 only while every model is warm and its service answers."""
        if not self.registry.done:
            raise errors.NotReady("models are not ready")
        if (silent := await self._silent_service()) is not None:
            raise errors.NotReady(f"the {silent} service is not ready")
        return {"unix": time.time()}

    async def _silent_service(self) -> str | None:
        """The first model service that does not answer its readiness probe within a second, or None.

        A model service restarting after a crash accepts connections it cannot answer yet; BentoML's own
        probe would wait 5 s on it, longer than an orchestrator's probe timeout.
        """
        for name, client in self.clients.items():
            proxy_ready = getattr(client, "is_ready", None)  # remote services only
            try:
                if proxy_ready is not None and not await proxy_ready(READINESS_TIMEOUT_S):
                    return name
            except (aiohttp.ClientError, TimeoutError):  # BentoML's probe lets a total timeout escape
                return name
        return None
