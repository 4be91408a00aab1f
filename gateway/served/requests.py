"""A request's side of the served models: which model it gets (an alias resolved, a lazy or evicted model loaded
and waited for), the pin that keeps that model loaded until it is answered, and its `keep_alive`.

One rule says what the server can serve (`servable`), for /readyz and for requests that name no model: a model
loaded, or one a request may load (lazy, or evicted); not one the admin unloaded, nor one whose load failed.
A request's `keep_alive` changes its model's residency for every caller: only a caller allowed to set it may.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from config import errors
from gateway.metrics import current_trace
from gateway.routing import choose_model, default_model
from gateway.served.reconciler import Refreshes
from gateway.served.registry import ModelRegistry
from gateway.served.states import ModelStates
from gateway.served.wanted import WantedModels
from gateway.shared_memory import SharedCounters
from gateway.tenants.keys import OPEN, TENANT, allowed, caller_id
from models.base import ModelInfo
from models.kinds import KindSpec, spec
from server_state.model_set import Wanted

# The pins' columns a request holds (`ModelSet.column`: a model's name, or an added model's slot).
REQUEST_PINS: ContextVar[list[str] | None] = ContextVar("embento_request_pins", default=None)


class RequestModels:
    """The served models as requests meet them, in one gateway worker."""

    def __init__(
        self,
        registry: ModelRegistry,
        wanted: WantedModels,
        states: ModelStates,
        refreshes: Refreshes,
        pins: SharedCounters,
    ) -> None:
        """`pins`: per gateway worker and model, the requests that resolved to the model and are not answered."""
        self._registry = registry
        self._wanted = wanted
        self._states = states
        self._refreshes = refreshes
        self._pins = pins

    async def model(self, requested: str | None, capability: str | None) -> ModelInfo:
        """The named model (or the one an alias names), or the first that can do `capability` (`default_model`);
        once warm (a lazy or evicted model is loaded and waited for), and if it did not fail."""
        registry = self._registry
        if not registry.done:
            raise errors.NotReady("models are still loading; retry shortly")
        asked = requested
        if asked is None:
            asked = default_model(allowed(registry.kinds), self.may_serve, capability)
        name = await self.serving(asked)
        if name is not None and name in registry.failed and TENANT.get().may_use(name):
            raise errors.ModelUnavailable(f"model '{name}' failed to load: {registry.failed[name]}", param="model")
        info = choose_model(allowed(registry.infos), name, capability)
        trace = current_trace()
        trace.model = info.served_model_name
        trace.alias = requested if requested not in (None, name) else None
        return info

    async def text_model(self, requested: str | None) -> ModelInfo:
        """The named model, or without a name the first text model servable (`default_model`): the tokenize and
        decode routes'."""
        if requested is None and self._registry.done:
            texts = {name: kind for name, kind in allowed(self._registry.kinds).items() if not spec(kind).takes_media}
            requested = default_model(texts, self.may_serve, None, "is a text model")
        return await self.model(requested, "embed" if requested is None else None)

    def kind_spec(self, requested: str | None) -> KindSpec | None:
        """The kind of the named model (or the one an alias names), or of the first configured one; None for a name
        that is no model's."""
        kinds = self._registry.kinds
        kind = kinds.get(self._wanted.resolve(requested) if requested else next(iter(kinds)))
        return spec(kind) if kind is not None else None

    def may_serve(self, name: str) -> bool:
        """Whether a request may be served by the model now: loaded and warm here, or loadable on demand (lazy, or
        evicted; failed only for want of room in the budget then). Not one the admin unloaded (a 404 until loaded
        again), nor one whose load failed."""
        if not self._states.controlled:  # nothing loads at run time: what is warm is all there is
            return name in self._registry.infos
        entry = self._wanted.read().models.get(name)
        if entry is None or not (entry.loaded or entry.on_request) or self._states.failed_here(name):
            return False
        state = self._states.of(name)
        return state.state != "failed" or entry.loaded or state.refused

    def servable(self) -> list[str]:
        """The models a request may be served by now (`may_serve`), in configuration order: the server is ready
        while there is one."""
        return [name for name in self._registry.kinds if self.may_serve(name)]

    def in_flight(self, name: str) -> int:
        """The requests (and bulk-job lines) for the model that every gateway worker holds now: pinned from when
        they resolve to it until they are answered, so the count is exact at any moment."""
        return self._pins.total(self._wanted.column(name))

    async def serving(self, requested: str | None) -> str | None:
        """The model a request names, loaded and warm here when it can be: an alias resolved; a lazy or evicted
        model wanted and waited for, up to the request's deadline (then a 503 with Retry-After).

        The wanted set is read afresh for each request, the workers' status files only once per reconciler pass: a
        model the set no longer wants is not routed to on the registry's word. One unloaded by the admin is a 404
        at once; one evicted is wanted again, and served once a pass begun after that has found it loaded."""
        if requested is None or not self._wanted.shared:
            return requested
        name = self._wanted.resolve(requested)
        if name not in self._registry.kinds or not self._states.controlled or name not in self._wanted.read().models:
            return name  # no model's (or one added at run time and removed since): `model` answers 404
        entry = self._pinned(name)
        if entry.loaded and name in self._registry.infos:
            return name
        deadline = self._refreshes.deadline()
        asked_at: int | None = None
        while True:
            if not (entry.loaded or entry.on_request):
                raise errors.UnknownModel(f"model '{name}' is not served now: it was unloaded", param="model")
            if self._states.failed_here(name):
                return name  # held by its services, but its warm-up here failed: the registry says why (503)
            state = self._states.of(name)
            if state.state == "failed" and not entry.loaded and (asked_at is not None or not state.refused):
                return name  # the registry says why (503); a refusal by the budget is tried again once
            if not entry.loaded:
                self._wanted.want(name, caller_id(TENANT.get()))
                asked_at = self._refreshes.begun
            elif name in self._registry.infos and (asked_at is None or self._refreshes.done_from > asked_at):
                return name
            await self._refreshes.next_or_503(deadline, f"model '{name}' is still loading; retry shortly")
            found = self._wanted.read().models.get(name)
            if found is None:  # an added model, removed as the request waited for it
                raise errors.UnknownModel(f"model '{name}' is not served now: it was removed", param="model")
            entry = found

    @contextmanager
    def holding(self) -> Iterator[None]:
        """One request's scope: the models it names stay loaded until it ends (`_pinned`)."""
        held: list[str] = []
        token = REQUEST_PINS.set(held)
        try:
            yield
        finally:
            REQUEST_PINS.reset(token)
            for column in held:
                with self._pins.locked():
                    self._pins.add(column, -1)

    def _pinned(self, name: str) -> Wanted:
        """The model's wanted state, read under the pins' lock once this request pins it (in a request's scope):
        either it is still wanted, and no model service will evict it until the request ends, or it is not."""
        held = REQUEST_PINS.get()
        if held is None:
            return self._wanted.read().models[name]
        with self._pins.locked():
            column = self._wanted.column(name)  # by its column: one added at run time has a slot
            if column not in held:
                self._pins.add(column, 1)
                held.append(column)
            return self._wanted.read().models[name]

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
        """A request's `keep_alive` for its model, from now on, its caller allowed (`check_keep_alive`)."""
        self._wanted.keep_alive(name, seconds, caller_id(TENANT.get()))
