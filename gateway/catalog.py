"""The models a server may serve, as every gateway worker sees them at run time: what is wanted
(server_state/model_set.py, shared by the server's processes) and what the model-service workers hold (their
status files).

Each gateway worker follows the status files: a model every worker of its service holds is warmed up here (the
start's calibration) and only then served (`ModelRegistry.infos`); one unloaded or failed leaves the registry. A
request for a lazy or evicted model wants it loaded and waits for it, up to its deadline (`serving`); an alias
resolves to its model when the request arrives, so requests in flight finish on the model they started on.

One rule says what the server can serve (`servable`), for /readyz and for requests that name no model: a model
loaded, or one a request may load (lazy, or evicted); not one the admin unloaded, nor one whose load failed.
A request's `keep_alive` changes its model's residency for every caller: only a caller allowed to set it may.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from config import errors
from config.durations import duration_text
from config.settings import EmbentoConfig
from gateway.shared_memory import SharedCounters
from gateway.startup.warmup import TRANSIENT, ModelRegistry, describe
from gateway.tenants.keys import OPEN, TENANT, caller_id
from models.base import ModelInfo
from models.kinds import spec
from server_state.model_set import (
    PINS_FILE,
    WARM_FILE,
    ModelSet,
    ModelStatus,
    SharedModelSet,
    State,
    Wanted,
    pinned_names,
)

logger = logging.getLogger(__name__)
REQUEST_PINS: ContextVar[list[str] | None] = ContextVar("embento_request_pins", default=None)
FOLLOW_EVERY_S = 0.1  # how soon a gateway worker sees a model loaded or unloaded


@dataclass(frozen=True)
class ServerState:
    """One model across its service's workers: `loaded` once every worker holds it."""

    state: State
    reason: str | None = None
    info: ModelInfo | None = None
    load_s: float | None = None
    weight_bytes: int = 0
    refused: bool = False  # failed because the budget had no room then: a later request may try again


def server_state(statuses: list[ModelStatus]) -> ServerState | None:
    """The workers' statuses of one model, as one (None when no worker has reported: a split topology's)."""
    if not statuses:
        return None
    states = {status.state for status in statuses}
    first = statuses[0]
    for state in ("failed", "loading", "unloaded"):
        if state in states:
            found = next(status for status in statuses if status.state == state)
            return ServerState(found.state, found.reason, refused=found.refused)
    info = ModelInfo(**first.info) if first.info else None
    return ServerState("loaded", None, info, first.load_s, first.weight_bytes)


class Catalog:
    """The run-time model set seen from this gateway worker: aliases, loads on request, keep_alive, and the
    registry kept to what the model services hold."""

    def __init__(
        self,
        config: EmbentoConfig,
        registry: ModelRegistry,
        workers: Callable[[], int] = lambda: 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`workers`: how many gateway workers the server runs (asked once one serves, as `Lifecycle` does)."""
        self.config = config
        self.registry = registry
        self._workers = workers
        self.shared: SharedModelSet | None = None  # the server's, once `start` runs in the worker
        self._clock = clock
        self._changed = asyncio.Event()
        self._states: dict[str, ServerState] = {}
        self._warm_up: Callable[[ModelInfo], Awaitable[None]] | None = None
        self._task: asyncio.Task | None = None
        self._synced = False  # whether the registry has met the states read since the start's warm-up
        self._pins = SharedCounters(pinned_names(config), PINS_FILE)
        # Per gateway worker and model, 1 while the model is warm in that worker's registry: the admin API answers
        # once every worker has met its change.
        self._warm = SharedCounters(pinned_names(config), WARM_FILE)
        self._published: set[str] = set()
        self._refreshes_begun = 0
        self._refreshed_from = 0  # the number of the last refresh done: it began after any want numbered lower

    @property
    def controlled(self) -> bool:
        """Whether the model services share this server's files (not in a split topology, where each pod
        serves what its configuration says)."""
        return self.shared is not None and bool(self._states)

    def wanted(self) -> ModelSet:
        return self.shared.read() if self.shared is not None else ModelSet.configured(self.config)

    def states(self) -> dict[str, ServerState]:
        """Each configured model's state across its service's workers, in configuration order, read now from their
        status files (so every gateway worker reports the same), else as this worker knows it."""
        fresh = self._read_states() if self.shared is not None else {}
        return {name: self._as_served(name, fresh.get(name)) for name in self.registry.kinds}

    def _read_states(self) -> dict[str, ServerState]:
        """From the status files: each model's state, where its service's workers have reported one."""
        assert self.shared is not None
        by_worker = self.shared.statuses()
        found = {}
        for name, kind in self.registry.kinds.items():
            service = spec(kind).model_service
            statuses = [
                reported[name]
                for worker, reported in by_worker.items()
                if _of_service(worker, service) and name in reported
            ]
            if (state := server_state(statuses)) is not None:
                found[name] = state
        return found

    def state_names(self) -> dict[str, str]:
        """Each configured model's state, by name (/readyz)."""
        return {name: state.state for name, state in self.states().items()}

    def state_of(self, name: str) -> ServerState:
        """A model's state as this worker last read it."""
        return self._as_served(name, self._states.get(name))

    def _as_served(self, name: str, state: ServerState | None) -> ServerState:
        """The model services' state of a model, unless this gateway failed to warm up one they hold: then failed,
        as the registry says (and with no state reported, the registry's word)."""
        if self._failed_here(name, state):
            return ServerState("failed", self.registry.failed[name])
        if state is not None:
            return state
        return ServerState("loaded" if name in self.registry.infos else "unloaded")

    def _failed_here(self, name: str, state: ServerState | None) -> bool:
        return name in self.registry.failed and (state is None or state.state == "loaded")

    def may_serve(self, name: str) -> bool:
        """Whether a request may be served by the model now: loaded and warm here, or loadable on demand (lazy, or
        evicted; failed only for want of room in the budget then). Not one the admin unloaded (a 404 until loaded
        again), nor one whose load failed."""
        if not self.controlled:  # nothing loads at run time: what is warm is all there is
            return name in self.registry.infos
        entry = self.wanted().models[name]
        if not (entry.loaded or entry.on_request) or self._failed_here(name, self._states.get(name)):
            return False
        state = self.state_of(name)
        return state.state != "failed" or entry.loaded or state.refused

    def servable(self) -> list[str]:
        """The models a request may be served by now (`may_serve`), in configuration order: the server is ready
        while there is one."""
        return [name for name in self.registry.kinds if self.may_serve(name)]

    def in_flight(self, name: str) -> int:
        """The requests (and bulk-job lines) for the model that every gateway worker holds now: pinned from when
        they resolve to it until they are answered, so the count is exact at any moment."""
        return self._pins.total(name)

    def start(self, warm_up: Callable[[ModelInfo], Awaitable[None]], shared: SharedModelSet | None) -> None:
        """In the gateway worker: follow the model services' status files in `shared` (the registry from when the
        start's warm-up is done)."""
        self._warm_up = warm_up
        self.shared = shared
        self._pins.open()  # now, in the worker: its rows start at zero
        self._warm.open()
        if shared is not None:
            self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            try:
                await self._refresh()
            except Exception:  # a bad read must not end the task: the next one reads again
                logger.exception("reading the model services' status failed")
            await asyncio.sleep(FOLLOW_EVERY_S)

    async def _refresh(self) -> None:
        assert self.shared is not None
        self._refreshes_begun += 1
        begun = self._refreshes_begun
        for name, state in self._read_states().items():
            if self.registry.done and (state != self._states.get(name) or not self._synced):
                if not await self._apply(name, state):
                    continue  # met again on the next refresh
            self._states[name] = state
        self._synced = self.registry.done
        self._publish()
        self._refreshed_from = begun
        self._changed.set()
        self._changed = asyncio.Event()

    def _publish(self) -> None:
        """This worker's warm models, for the others to count (`warm_everywhere`)."""
        warm = set(self.registry.infos)
        with self._warm.locked():
            for name in warm ^ self._published:
                self._warm.add(name, 1 if name in warm else -1)
        self._published = warm

    def warm_everywhere(self, name: str) -> bool:
        """Whether every gateway worker of the server serves the model (warm in its registry)."""
        return self._warm.total(name) >= self._workers()

    def gone_everywhere(self, name: str) -> bool:
        """Whether no gateway worker serves the model any more."""
        return self._warm.total(name) == 0

    async def _apply(self, name: str, state: ServerState) -> bool:
        """The registry brought to a model's new state (a loaded one warmed up here before it is served); False
        when that must be tried again (the model went while it warmed up)."""
        registry = self.registry
        if state.state == "loaded" and state.info is not None:
            if name not in registry.infos or registry.infos[name] != state.info:
                return await self._warmed(name, state.info)
            return True
        registry.infos.pop(name, None)
        registry.quantizers.pop(name, None)
        if state.state == "failed":
            registry.failed[name] = state.reason or "its load failed"
        else:
            registry.failed.pop(name, None)
        return True

    async def _warmed(self, name: str, info: ModelInfo) -> bool:
        assert self._warm_up is not None
        try:
            await self._warm_up(info)
        except TRANSIENT:  # unloaded again as it warmed up, or its service busy: the next refresh tells
            return False
        except Exception as exc:  # a model that fails its warm-up is not served: the same rule as at start
            self.registry.failed[name] = f"its warm-up failed: {describe(exc)}"
            self.registry.infos.pop(name, None)
            return True
        self.registry.failed.pop(name, None)
        infos = {**self.registry.infos, name: info}
        order = [m.served_model_name for m in self.config.models]  # the first capable model is the default
        self.registry.infos = {n: infos[n] for n in order if n in infos}
        return True

    async def serving(self, requested: str | None) -> str | None:
        """The model a request names, loaded and warm here when it can be: an alias resolved; a lazy or evicted
        model wanted and waited for, up to the request's deadline (then a 503 with Retry-After).

        The wanted set is read afresh for each request, the workers' status files only every `FOLLOW_EVERY_S`: a
        model the set no longer wants is not routed to on the registry's word. One unloaded by the admin is a 404
        at once; one evicted is wanted again, and served once a refresh begun after that has found it loaded."""
        if requested is None or self.shared is None:
            return requested
        name = self.wanted().resolve(requested)
        if name not in self.registry.kinds or not self.controlled:
            return name
        entry = self._pinned(name)
        if entry.loaded and name in self.registry.infos:
            return name
        deadline = self.deadline()
        asked_at: int | None = None
        while True:
            if not (entry.loaded or entry.on_request):
                raise errors.UnknownModel(f"model '{name}' is not served now: it was unloaded", param="model")
            if self._failed_here(name, self._states.get(name)):
                return name  # held by its services, but its warm-up here failed: the registry says why (503)
            state = self.state_of(name)
            if state.state == "failed" and not entry.loaded and (asked_at is not None or not state.refused):
                return name  # the registry says why (503); a refusal by the budget is tried again once
            if not entry.loaded:
                self.want(name, caller_id(TENANT.get()))
                asked_at = self._refreshes_begun
            elif name in self.registry.infos and (asked_at is None or self._refreshed_from > asked_at):
                return name
            await self._next_refresh(deadline, name)
            entry = self.wanted().models[name]

    @contextmanager
    def holding(self) -> Iterator[None]:
        """One request's scope: the models it names stay loaded until it ends (`_pinned`)."""
        held: list[str] = []
        token = REQUEST_PINS.set(held)
        try:
            yield
        finally:
            REQUEST_PINS.reset(token)
            for name in held:
                with self._pins.locked():
                    self._pins.add(name, -1)

    def _pinned(self, name: str) -> Wanted:
        """The model's wanted state, read under the pins' lock once this request pins it (in a request's scope):
        either it is still wanted, and no model service will evict it until the request ends, or it is not."""
        held = REQUEST_PINS.get()
        if held is None:
            return self.wanted().models[name]
        with self._pins.locked():
            if name not in held:
                self._pins.add(name, 1)
                held.append(name)
            return self.wanted().models[name]

    async def _next_refresh(self, deadline: float, name: str) -> None:
        if not await self.next_refresh(deadline):
            raise errors.NotReady(f"model '{name}' is still loading; retry shortly")

    async def next_refresh(self, deadline: float) -> bool:
        """Wait for the next refresh of the model services' states; False at `deadline` (on the catalog's clock)."""
        left = deadline - self._clock()
        if left <= 0:
            return False
        try:
            await asyncio.wait_for(self._changed.wait(), left)
        except TimeoutError:
            return False
        return True

    def deadline(self) -> float:
        """A request's deadline from now, on the catalog's clock."""
        return self._clock() + self.config.request_timeout_s

    def want(self, name: str, by: str) -> None:
        """Mark a model wanted loaded (and loadable by requests again), asked by `by` (`caller_id`)."""
        assert self.shared is not None

        def want(models: ModelSet) -> None:
            models.models[name].loaded = True
            models.models[name].on_request = True
            models.models[name].asked_by = by

        self.shared.change(want)

    def check_keep_alive(self, seconds: float | None) -> None:
        """A 403 for a request's `keep_alive` unless its caller may set it: it changes how long the model stays
        loaded for every caller (`keep_alive: 0` unloads it after each request, `-1` pins it), so the operator
        allows it (the keys file's `may_set_keep_alive`; the admin key where no API key is configured)."""
        tenant = TENANT.get()
        if seconds is None or tenant.may_set_keep_alive:
            return
        allowed_by = (
            "on a server without API keys only the admin key may set it (Authorization: Bearer <admin key>)"
            if tenant is OPEN
            else f"the keys file does not allow tenant '{tenant.name}' to set it (may_set_keep_alive)"
        )
        raise errors.Forbidden(
            f"keep_alive sets how long the model stays loaded for every caller: {allowed_by}; send the request "
            "without it",
            param="keep_alive",
        )

    def keep_alive(self, name: str, seconds: float | None) -> None:
        """A request's `keep_alive` for its model, from now on (`math.inf`: forever; None: it gave none), its caller
        allowed (`check_keep_alive`)."""
        if self.shared is None or seconds is None:
            return
        keep = None if math.isinf(seconds) else seconds
        by = caller_id(TENANT.get())
        was: list[float | None] = []

        def set_keep_alive(models: ModelSet) -> None:
            entry = models.models[name]
            was.append(entry.keep_alive_s)
            entry.keep_alive_s, entry.keep_alive_by = keep, by

        if self.wanted().models[name].keep_alive_s != keep:
            self.shared.change(set_keep_alive)
            logger.info(
                "model '%s' keep_alive set to %s by %s (it was %s)",
                name,
                duration_text(keep),
                by,
                duration_text(was[0]),
            )


def _of_service(worker: str, service: str) -> bool:
    """Whether a status file's worker (`<service>-<index>`) is one of `service`'s."""
    return worker.rsplit("-", 1)[0] == service
