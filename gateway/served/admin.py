"""The admin API's operations on the run-time model set (gateway/http/admin.py routes onto them): the report, load,
unload and aliases, each a change of the server's wanted set (server_state/model_set.py) and a wait until the model
services and every gateway worker have met it.

Each change done is one INFO line, asked by `admin` (the admin key alone opens these routes; a refused call is
gateway/http/admin.py's line); the model services log what they then load or unload (runners/residency.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from config import errors
from config.durations import duration_text
from gateway.served.reconciler import Refreshes
from gateway.served.registry import ModelRegistry
from gateway.served.requests import RequestModels
from gateway.served.states import ModelStates
from gateway.served.wanted import WantedModels
from gateway.served.warm_flags import WarmFlags
from server_state.model_set import ModelSet

logger = logging.getLogger(__name__)  # each change made, in the server log: the admin routes have no access log
ADMIN = "admin"  # who asks, in the wanted set and the log lines: the admin key's holder


class ModelAdmin:
    """Admin operations, through the served models' parts: what is wanted (changed here), what the services hold,
    what this worker serves, and what every worker serves (waited for)."""

    def __init__(
        self,
        registry: ModelRegistry,
        wanted: WantedModels,
        states: ModelStates,
        requests: RequestModels,
        flags: WarmFlags,
        refreshes: Refreshes,
        budget: dict[str, int | None],
    ) -> None:
        """`budget`: what each model-service worker may hold, as configured (reported as it is)."""
        self._registry = registry
        self._wanted = wanted
        self._states = states
        self._requests = requests
        self._flags = flags
        self._refreshes = refreshes
        self._budget = budget

    def report(self) -> dict[str, Any]:
        """Every model the server may serve, with its state, its settings and the figures of its last load."""
        wanted, states = self._wanted.read(), self._states.all()
        models = []
        for name, kind in self._registry.kinds.items():
            cfg, state, entry = self._wanted.settings(name), states[name], wanted.models.get(name)
            if cfg is None:  # added at run time and removed, this worker not yet past it
                continue
            models.append(
                {
                    "id": name,
                    "kind": kind,
                    "state": state.state,
                    "reason": state.reason,
                    "load": cfg.load,
                    "keep_alive_s": entry.keep_alive_s if entry else cfg.keep_alive,
                    "aliases": sorted(alias for alias, target in wanted.aliases.items() if target == name),
                    "load_seconds": state.load_s,
                    "weight_bytes": state.weight_bytes,
                    "in_flight": self._requests.in_flight(name),
                }
            )
        controlled = self._states.controlled
        return {"models": models, "aliases": wanted.aliases, "budget": self._budget, "controlled": controlled}

    async def load(self, name: str) -> dict[str, Any]:
        """Load a configured model (the start's path, in each worker of its service) and warm it here; the others
        serve on. Raises with the reason if it failed or was refused. The answer's `reset` says what residency a
        request had set that the load put back to the configured one."""
        self._check_controlled(name)
        reset = self._want_loaded(name)
        await self.until(lambda: self._flags.everywhere(name) or self.failed_for_good(name))
        if not self._flags.everywhere(name):
            state = self._states.of(name)
            raise errors.ModelUnavailable(f"model '{name}' did not load: {state.reason}", param="model")
        entry = self.entry(name)
        logger.info("admin: model '%s' loaded, asked by %s%s", name, ADMIN, _reset_text(reset, entry["keep_alive_s"]))
        return {**entry, "reset": reset}

    def _want_loaded(self, name: str) -> dict[str, Any]:
        """Wanted loaded, with its configured `keep_alive`: the admin's load wins over one a request set (a request's
        `keep_alive: 0` would evict it again before it had warmed up). What was reset, by field."""
        settings = self._wanted.settings(name)
        assert settings is not None, "checked by _check_controlled"
        configured = settings.keep_alive
        reset: dict[str, Any] = {}

        def want(models: ModelSet) -> None:
            entry = models.models[name]
            if entry.keep_alive_s != configured:
                reset["keep_alive_s"] = {"was": entry.keep_alive_s, "set_by": entry.keep_alive_by}
            entry.keep_alive_s, entry.keep_alive_by = configured, None
            entry.loaded = entry.on_request = True
            entry.asked_by = ADMIN

        self._change(want)
        return reset

    async def unload(self, name: str) -> dict[str, Any]:
        """Drop a model everywhere; requests naming it then get a 404 until it is loaded again."""
        self._check_controlled(name)

        def unwant(models: ModelSet) -> None:
            models.models[name].loaded = False
            models.models[name].on_request = False
            models.models[name].asked_by = ADMIN

        self._change(unwant)
        await self.until(lambda: self._states.of(name).state in ("unloaded", "failed") and self._flags.nowhere(name))
        logger.info("admin: model '%s' unloaded, asked by %s", name, ADMIN)
        return self.entry(name)

    async def point_alias(self, alias: str, name: str) -> dict[str, Any]:
        """Move (or make) an alias onto a loaded model, once every gateway worker serves it: requests arriving from
        then on resolve to it, those in flight finish on the model they started on."""
        self._check_controlled(name)
        if alias in self._registry.kinds:
            raise errors.InvalidRequest(f"'{alias}' is a model's own name, not an alias", param="alias")
        if not self._wanted.read().models[name].loaded:
            raise errors.Conflict(f"model '{name}' is not loaded; load it first", param="model")
        await self.until(lambda: self._flags.everywhere(name) or not self._wanted.read().models[name].loaded)
        if not self._flags.everywhere(name):
            raise errors.Conflict(f"model '{name}' was unloaded before the alias could move", param="model")

        before: list[str | None] = []

        def point(models: ModelSet) -> None:
            before.append(models.aliases.get(alias))
            models.aliases[alias] = name

        self._change(point)
        moved = "made" if before[0] is None else f"moved from '{before[0]}'"
        logger.info("admin: alias '%s' %s to '%s', asked by %s", alias, moved, name, ADMIN)
        return {"alias": alias, "model": name}

    def remove_alias(self, alias: str) -> dict[str, Any]:
        if alias not in self._wanted.read().aliases:
            raise errors.NotFound(f"no alias '{alias}'", param="alias")
        removed: list[str | None] = []

        def remove(models: ModelSet) -> None:
            removed.append(models.aliases.pop(alias, None))

        self._change(remove)
        logger.info("admin: alias '%s' removed (it named '%s'), asked by %s", alias, removed[0], ADMIN)
        return {"alias": alias, "deleted": True}

    def entry(self, name: str) -> dict[str, Any]:
        return next(model for model in self.report()["models"] if model["id"] == name)

    def _check_controlled(self, name: str) -> None:
        if name not in self._registry.kinds:
            raise errors.UnknownModel(
                f"model '{name}' is not configured here; configured: {list(self._registry.kinds)}"
            )
        self.check_ready()

    def check_ready(self) -> None:
        """A 503 while the start's warm-up runs; a 409 where the model services run apart (nothing to change)."""
        if not self._registry.done:
            raise errors.NotReady("models are still loading; retry shortly")
        if not self._states.controlled:
            raise errors.Conflict(
                "the model services run apart from this gateway (a split topology): change the models through "
                "the deployment's configuration instead (docs/operations.md)"
            )

    def failed_for_good(self, name: str) -> bool:
        """Failed, and the model services have given up on it (it is no longer wanted)."""
        entry = self._wanted.read().models.get(name)
        return self._states.of(name).state == "failed" and not (entry and entry.loaded)

    async def until(self, done: Callable[[], bool]) -> None:
        """Wait for the next passes until `done`, at most a request's deadline (then a 503)."""
        deadline = self._refreshes.deadline()
        while not done():
            await self._refreshes.next_or_503(deadline, "the model services have not finished; see GET /admin/models")

    def _change(self, edit: Callable[[ModelSet], None]) -> None:
        self._wanted.change(edit)  # controlled: checked by _check_controlled


def _reset_text(reset: dict[str, Any], configured: float | None) -> str:
    """What a load reset, for its log line."""
    if "keep_alive_s" not in reset:
        return ""
    was = reset["keep_alive_s"]
    return (
        f"; keep_alive reset to the configured {duration_text(configured)} (it was {duration_text(was['was'])}, "
        f"set by {was['set_by'] or 'the configuration'})"
    )
