"""Each model's state across the workers of its model service, read from their status files
(server_state/model_set.py), and as this gateway worker serves it."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.served.registry import ModelRegistry
from models.base import ModelInfo
from models.kinds import spec
from server_state.model_set import ModelStatus, SharedModelSet, State


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


class ModelStates:
    """The model services' word on each model (`read`, from the files now), the states this worker has met (`met`,
    kept by the reconciler), and both seen through the registry (`of`, `all`): a model this worker failed to warm up
    is failed here, whatever its services hold."""

    def __init__(self, registry: ModelRegistry) -> None:
        self._registry = registry
        self._shared: SharedModelSet | None = None
        self.met: dict[str, ServerState] = {}  # as the last refresh found them: the reconciler's to write

    def attach(self, shared: SharedModelSet | None) -> None:
        self._shared = shared

    @property
    def controlled(self) -> bool:
        """Whether the model services share this server's files (not in a split topology, where each pod serves what
        its configuration says)."""
        return self._shared is not None and bool(self.met)

    def read(self) -> dict[str, ServerState]:
        """From the status files: each model's state, where its service's workers have reported one."""
        if self._shared is None:
            return {}
        by_worker = self._shared.statuses()
        found = {}
        for name, kind in self._registry.kinds.items():
            service = spec(kind).model_service
            statuses = [
                reported[name]
                for worker, reported in by_worker.items()
                if _of_service(worker, service) and name in reported
            ]
            if (state := server_state(statuses)) is not None:
                found[name] = state
        return found

    def all(self) -> dict[str, ServerState]:
        """Each model's state, in configuration order, read now from the status files (so that every gateway worker
        reports the same), else as this worker knows it."""
        fresh = self.read()
        return {name: self._as_served(name, fresh.get(name)) for name in self._registry.kinds}

    def names(self) -> dict[str, str]:
        """Each model's state, by name (/readyz)."""
        return {name: state.state for name, state in self.all().items()}

    def of(self, name: str) -> ServerState:
        """A model's state as this worker last met it."""
        return self._as_served(name, self.met.get(name))

    def failed_here(self, name: str) -> bool:
        """Whether this gateway worker failed to warm up a model its services hold, as last met (or, with no word
        from them, the registry says it failed)."""
        return _failed_with(self._registry, name, self.met.get(name))

    def _as_served(self, name: str, state: ServerState | None) -> ServerState:
        """The model services' state of a model, unless this gateway failed to warm up one they hold: then failed,
        as the registry says (and with no state reported, the registry's word)."""
        if _failed_with(self._registry, name, state):
            return ServerState("failed", self._registry.failed[name])
        if state is not None:
            return state
        return ServerState("loaded" if name in self._registry.infos else "unloaded")


def _failed_with(registry: ModelRegistry, name: str, state: ServerState | None) -> bool:
    return name in registry.failed and (state is None or state.state == "loaded")


def _of_service(worker: str, service: str) -> bool:
    """Whether a status file's worker (`<service>-<index>`) is one of `service`'s."""
    return worker.rsplit("-", 1)[0] == service
