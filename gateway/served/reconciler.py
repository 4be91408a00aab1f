"""The registry kept to the server's models: the start's warm-up as the first reconcile, then the model services'
status files followed every `FOLLOW_EVERY_S`. The registry's one writer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from config import errors
from gateway.served.registry import ModelRegistry
from gateway.served.states import ModelStates, ServerState
from gateway.served.wanted import WantedModels
from gateway.served.warm_flags import WarmFlags
from gateway.served.warmup import TRANSIENT, Warmer, Warmup, describe
from models.base import ModelInfo
from models.kinds import model_kind
from server_state.model_set import ModelSet

logger = logging.getLogger(__name__)
FOLLOW_EVERY_S = 0.1  # how soon a gateway worker sees a model loaded or unloaded
WARMUP_RETRY_S = 1.0


class Refreshes:
    """The reconciler's passes over the status files, as those who wait on them see them: a request waiting for its
    model, an admin call waiting for every worker. `begun` numbers each pass as it starts; `done_from` is the number
    of the last one done (it began after anything asked before it)."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._changed = asyncio.Event()
        self.begun = 0
        self.done_from = 0

    def begin(self) -> int:
        self.begun += 1
        return self.begun

    def done(self, begun: int) -> None:
        self.done_from = begun
        self._changed.set()
        self._changed = asyncio.Event()

    def deadline(self) -> float:
        """A request's deadline from now (`request_timeout_s`), on this clock."""
        return self._clock() + self._timeout_s

    async def next(self, deadline: float) -> bool:
        """Wait for the next pass to end; False at `deadline`."""
        left = deadline - self._clock()
        if left <= 0:
            return False
        try:
            await asyncio.wait_for(self._changed.wait(), left)
        except TimeoutError:
            return False
        return True

    async def next_or_503(self, deadline: float, message: str) -> None:
        """The next pass, or at `deadline` a 503 with `message` (what is still under way)."""
        if not await self.next(deadline):
            raise errors.NotReady(message)


class Reconciler:
    """Brings this gateway worker's registry to what the server holds, one path for every change: a model is
    served once it is warm here (`warm`: the start's models, then each model loaded later), failed when its load or
    its warm-up here failed, dropped once its services no longer hold it."""

    def __init__(
        self,
        registry: ModelRegistry,
        states: ModelStates,
        flags: WarmFlags,
        refreshes: Refreshes,
        warming: Warmer,
        wanted: WantedModels,
    ) -> None:
        self._registry = registry
        self._states = states
        self._flags = flags
        self._refreshes = refreshes
        self._warming = warming
        self._wanted = wanted
        self._unprepared: set[str] = set()  # added models whose preprocessor failed here: logged once
        self._task: asyncio.Task | None = None

    def start(self, warmup: Warmup, follow: bool, warm_then: Callable[[], Awaitable[object]] | None = None) -> None:
        """The task: the start's warm-up (one try per `WARMUP_RETRY_S`, the only one that tries: a probe or request
        that tried too would wait on a model service still starting), `warm_then`, and while the model services
        share this server's files (`follow`), their status files."""
        self._task = asyncio.create_task(self._run(warmup, follow, warm_then))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self, warmup: Warmup, follow: bool, warm_then: Callable[[], Awaitable[object]] | None) -> None:
        if not self._registry.done:  # one built warm (the engine's tests) has had its start
            while not await warmup.attempt() and not warmup.stopped:
                await asyncio.sleep(WARMUP_RETRY_S)
            if warmup.done:
                self._registry.opened(warmup.served, warmup.failed)
        follow = follow and self._registry.done
        if follow:
            await self._refresh_once()  # the states met before readiness is first told (a lazy model counts)
        if warm_then is not None:
            await warm_then()  # into the readiness gauge, for servers no probe asks
        while follow:
            await asyncio.sleep(FOLLOW_EVERY_S)
            await self._refresh_once()

    async def _refresh_once(self) -> None:
        try:
            await self.refresh()
        except Exception:  # a bad read must not end the task: the next one reads again
            logger.exception("reading the model services' status failed")

    async def refresh(self) -> None:
        """One pass: each model's state read from the status files and met here."""
        begun = self._refreshes.begin()
        await self._follow_added(self._wanted.read())
        for name, state in self._states.read().items():
            if state != self._states.met.get(name) and not await self._apply(name, state):
                continue  # met again on the next pass
            self._states.met[name] = state
        self._flags.publish(self._registry.infos)
        self._refreshes.done(begun)

    async def _follow_added(self, models: ModelSet) -> None:
        """The models added at run time, met here: one new counts once its preprocessor is loaded (its warm-up needs
        it); one removed leaves the registry. A preprocessor that fails is logged once; the model is not served."""
        for name, added in models.added.items():
            if name in self._registry.kinds or name in self._unprepared:
                continue
            settings = added.config()
            try:
                kind = await asyncio.to_thread(model_kind, settings)
                await asyncio.to_thread(self._warming.prepare, settings, kind)
            except Exception as exc:  # the checkpoint, not this pass: trying again every pass would only repeat it
                logger.error("model '%s' added at run time: its preprocessor did not load: %s", name, describe(exc))
                self._unprepared.add(name)
                continue
            self._registry.added(name, kind)
        for name in [n for n in self._registry.kinds if n not in self._registry.configured and n not in models.added]:
            self._registry.removed(name)
            self._states.met.pop(name, None)
            self._warming.forget(name)
        self._unprepared &= set(models.added)

    async def _apply(self, name: str, state: ServerState) -> bool:
        """The registry brought to a model's new state (a loaded one warmed up here before it is served); False
        when that must be tried again (the model went while it warmed up)."""
        if state.state == "loaded" and state.info is not None:
            if self._registry.infos.get(name) != state.info:
                return await self._warmed(name, state.info)
            return True
        if state.state == "failed":
            self._registry.failed_to_serve(name, state.reason or "its load failed")
        else:
            self._registry.dropped(name)
        return True

    async def _warmed(self, name: str, info: ModelInfo) -> bool:
        try:
            quantizer = await self._warming(info)
        except TRANSIENT:  # unloaded again as it warmed up, or its service busy: the next pass tells
            return False
        except Exception as exc:  # a model that fails its warm-up is not served: the same rule as at start
            self._registry.failed_to_serve(name, f"its warm-up failed: {describe(exc)}")
            return True
        self._registry.served(name, info, quantizer)
        return True
