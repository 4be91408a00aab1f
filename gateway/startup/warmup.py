"""Warm-up: the server is ready once every model has reported its facts and answered a real call through each
of its modalities.

A warm-up failure that will not go away (a 4xx-class error, the model failing on the input, an output of
the wrong shape) is a load failure, under the same policy as a model that cannot load: the server stops, or
with `allow_partial` the model is reported failed while the others serve. A transient one (a model service
still starting) is retried; once it has lasted 30 s it is logged, with its reason, at WARNING once a minute.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp

from config import errors
from models.base import Kind, ModelInfo
from models.quantization import Quantizer

logger = logging.getLogger(__name__)
WARN_AFTER_S = 30.0
WARN_EVERY_S = 60.0
# What a model service still starting, restarting or busy answers: worth another try.
TRANSIENT = (
    errors.NotReady,
    errors.Overloaded,
    errors.RequestTimeout,
    aiohttp.ClientError,
    ConnectionError,
    TimeoutError,
)

FetchInfos = Callable[[], Awaitable[tuple[dict[str, ModelInfo], dict[str, str]]]]


@dataclass
class ModelRegistry:
    """What is known of the configured models: their kinds (configuration order; the first is the default),
    and once warm-up is `done` the ones served (`infos`), those that failed, and the int8/uint8 quantizers. After
    the start, the run-time catalog keeps it to what the model services hold (gateway/catalog.py)."""

    kinds: dict[str, Kind]
    lazy: frozenset[str] = frozenset()  # configured `load: lazy`: loaded by a request, not by the start
    infos: dict[str, ModelInfo] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    quantizers: dict[str, Quantizer] = field(default_factory=dict)
    done: bool = False


def describe(exc: BaseException) -> str:
    return exc.message if isinstance(exc, errors.EmbentoError) else repr(exc)


class Warmup:
    """Brings the models to warm, one attempt per call, and records what it found in `registry`: `infos` (the
    models served, in configuration order), `failed` (served name -> why) and `done`. `stopped`: the server
    is stopping."""

    def __init__(
        self,
        registry: ModelRegistry,
        fetch_infos: FetchInfos,
        warm_up: Callable[[ModelInfo], Awaitable[None]],
        allow_partial: bool,
        stop_server: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self._fetch_infos = fetch_infos
        self._warm_up = warm_up
        self._allow_partial = allow_partial
        self._stop_server = stop_server
        self._clock = clock
        self._warm: set[str] = set()
        self._failed_warm_up: dict[str, str] = {}
        self._waiting_since: float | None = None
        self._warned_at = -math.inf
        self.stopped = False

    async def attempt(self) -> bool:
        """One try at warming what is not warm yet; True once every model is warm or failed for good. The
        gateway's warm-up task alone calls it, one try at a time."""
        registry = self.registry
        if registry.done or self.stopped:
            return registry.done
        try:
            infos, failed = await self._fetch_infos()
        except Exception as exc:  # a model service still starting; one that cannot load stops the server
            self._still_waiting(exc)
            return False
        for name, info in infos.items():
            if name not in self._warm and name not in self._failed_warm_up and not await self._warm_one(info):
                return False
        registry.infos = {name: info for name, info in infos.items() if name in self._warm}
        registry.failed = {**failed, **self._failed_warm_up}
        registry.done = True
        logger.info("all models warm: %s; failed: %s", sorted(registry.infos), sorted(registry.failed) or "none")
        return True

    async def _warm_one(self, info: ModelInfo) -> bool:
        """False when the attempt must end here: a transient failure, or a permanent one that stops the server."""
        name = info.served_model_name
        try:
            await self._warm_up(info)
        except TRANSIENT as exc:
            self._still_waiting(exc)
            return False
        except Exception as exc:  # any other failure meets the same input again on every try
            reason = f"its warm-up failed: {describe(exc)}"
            if not self._allow_partial:
                self.stopped = True
                self._stop_server(f"model '{name}': {reason}")
                return False
            logger.warning("model '%s': %s; serving the other models (allow_partial)", name, reason)
            self._failed_warm_up[name] = reason
            return True
        self._warm.add(name)
        return True

    def _still_waiting(self, exc: BaseException) -> None:
        now = self._clock()
        if self._waiting_since is None:
            self._waiting_since = now
        waited = now - self._waiting_since
        if waited >= WARN_AFTER_S and now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning("models still not ready after %.0f s, retrying: %s", waited, describe(exc))
        else:
            logger.debug("models not ready yet: %s", describe(exc))  # the model services are usually starting
