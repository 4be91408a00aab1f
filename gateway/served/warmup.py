"""Warm-up, one model at a time (`Warming`: the one way a model becomes warm in a gateway worker, at the start or
later), and the start's policy over every model (`Warmup`): the server is ready once every model has reported its
facts and answered a real call through each of its modalities.

A warm-up failure that will not go away (a 4xx-class error, the model failing on the input, an output of
the wrong shape) is a load failure, under the same policy as a model that cannot load: the server stops, or
with `allow_partial` the model is reported failed while the others serve. A transient one (a model service
still starting) is retried; once it has lasted 30 s it is logged, with its reason, at WARNING once a minute.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Protocol

import aiohttp

from config import errors
from config.settings import ModelConfig
from gateway.cache.keys import model_identity
from gateway.cache.tiers import EmbeddingCache
from gateway.inputs.preprocessors import Preprocessors
from gateway.queue.model_calls import ModelCalls
from gateway.served.calibration import warm_up
from models.base import Kind, ModelInfo
from models.kinds import preprocessor_class
from models.media import MediaLimits
from models.quantization import Quantizer
from models.resolve import resolve_model

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
Warm = Callable[[ModelInfo], Awaitable[Quantizer | None]]


class Warmer(Protocol):
    """How a model becomes warm in this gateway worker (`Warming`): warmed up (the call), and for a model added at
    run time its preprocessor loaded first (`prepare`) and dropped once it is removed (`forget`)."""

    async def __call__(self, info: ModelInfo) -> Quantizer | None: ...

    def prepare(self, settings: ModelConfig, kind: Kind) -> None: ...

    def forget(self, name: str) -> None: ...


def describe(exc: BaseException) -> str:
    return exc.message if isinstance(exc, errors.EmbentoError) else repr(exc)


class Warming:
    """A model warmed up through this gateway worker: one real call through every modality it serves (with the
    calibration of its int8/uint8 quantizer, which it returns) and, for a model with `cache: true`, its identity,
    the root of its cache keys. Raises as the model fails."""

    def __init__(
        self,
        calls: ModelCalls,
        preprocessors: Preprocessors,
        cache: EmbeddingCache,
        limits: MediaLimits,
        settings: Callable[[str], ModelConfig | None],
    ) -> None:
        """`settings`: a model's entry (configured, or added at run time)."""
        self._calls = calls
        self._preprocessors = preprocessors
        self._cache = cache
        self._limits = limits
        self._settings = settings

    async def __call__(self, info: ModelInfo) -> Quantizer | None:
        cfg = self._settings(info.served_model_name)
        assert cfg is not None, "a model its services hold is one the server may serve"
        quantizer = await warm_up(info, self._calls, self._preprocessors, cfg, self._limits)
        if cfg.cache:
            folder = resolve_model(cfg.model_id, cfg.revision)
            self._cache.enable(info.served_model_name, await asyncio.to_thread(model_identity, cfg, info, folder))
        return quantizer

    def prepare(self, settings: ModelConfig, kind: Kind) -> None:
        """The preprocessor of a model added at run time (`KindSpec.preprocessor`, as the start loads the configured
        ones'), before it can be warmed up; blocking (reads the checkpoint's files): call it off the event loop."""
        name = settings.served_model_name
        if name not in self._preprocessors.by_model:
            folder = resolve_model(settings.model_id, settings.revision)
            self._preprocessors.by_model[name] = preprocessor_class(kind)(folder, settings, kind)

    def forget(self, name: str) -> None:
        """A model added at run time, removed: its preprocessor goes."""
        self._preprocessors.by_model.pop(name, None)


def reported_infos(clients: Mapping[str, Any], failed_here: Mapping[str, str], eager: Collection[str]) -> FetchInfos:
    """The start's source: the models each service reports serving, and those that failed to load here (their
    preprocessors) or there; NotReady until every `eager` model is one or the other."""

    async def fetch() -> tuple[dict[str, ModelInfo], dict[str, str]]:
        reports = [await client.to_async.model_info() for client in clients.values()]
        failed = {name: reason for report in reports for name, reason in report["failed"].items()}
        failed.update(failed_here)
        infos = {i["served_model_name"]: ModelInfo(**i) for report in reports for i in report["models"]}
        missing = set(eager) - set(infos) - set(failed)
        if missing:
            raise errors.NotReady(f"no model service reported {sorted(missing)}")
        return {name: infos[name] for name in eager if name not in failed}, failed

    return fetch


class Warmup:
    """The start's reconcile: brings the models its source reports to warm, one attempt per call, and keeps what
    it found: `served` (name -> facts and quantizer, in the source's order) and `failed` (name -> why).
    `stopped`: the server is stopping."""

    def __init__(
        self,
        fetch_infos: FetchInfos,
        warm: Warm,
        allow_partial: bool,
        stop_server: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch_infos = fetch_infos
        self._warm = warm
        self._allow_partial = allow_partial
        self._stop_server = stop_server
        self._clock = clock
        self._warmed: dict[str, tuple[ModelInfo, Quantizer | None]] = {}
        self._failed_warm_up: dict[str, str] = {}
        self._waiting_since: float | None = None
        self._warned_at = -math.inf
        self.served: dict[str, tuple[ModelInfo, Quantizer | None]] = {}
        self.failed: dict[str, str] = {}
        self.done = False
        self.stopped = False

    async def attempt(self) -> bool:
        """One try at warming what is not warm yet; True once every model is warm or failed for good. The
        reconciler alone calls it, one try at a time."""
        if self.done or self.stopped:
            return self.done
        try:
            infos, failed = await self._fetch_infos()
        except Exception as exc:  # a model service still starting; one that cannot load stops the server
            self._still_waiting(exc)
            return False
        for name, info in infos.items():
            if name not in self._warmed and name not in self._failed_warm_up and not await self._warm_one(info):
                return False
        self.served = {name: self._warmed[name] for name in infos if name in self._warmed}
        self.failed = {**failed, **self._failed_warm_up}
        self.done = True
        logger.info("all models warm: %s; failed: %s", sorted(self.served), sorted(self.failed) or "none")
        return True

    async def _warm_one(self, info: ModelInfo) -> bool:
        """False when the attempt must end here: a transient failure, or a permanent one that stops the server."""
        name = info.served_model_name
        try:
            quantizer = await self._warm(info)
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
        self._warmed[name] = (info, quantizer)
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
