"""The admin API's operations on the run-time model set (gateway/http/admin.py routes onto them): the report, load,
unload and aliases, each a change of the server's wanted set (config/model_set.py) and a wait until the model
services and this gateway worker have met it (gateway/catalog.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from config import errors
from config.model_set import ModelSet
from gateway.catalog import Catalog

logger = logging.getLogger(__name__)  # each change asked, in the server log: the admin routes have no access log


class ModelAdmin:
    """Admin operations on one gateway worker's catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def report(self) -> dict[str, Any]:
        """Every model the server may serve, with its state, its settings and the figures of its last load."""
        wanted, states = self.catalog.wanted(), self.catalog.states()
        models = []
        for cfg in self.catalog.config.models:
            name, state = cfg.served_model_name, states[cfg.served_model_name]
            entry = wanted.models.get(name)
            models.append(
                {
                    "id": name,
                    "kind": self.catalog.registry.kinds[name],
                    "state": state.state,
                    "reason": state.reason,
                    "load": cfg.load,
                    "keep_alive_s": entry.keep_alive_s if entry else cfg.keep_alive,
                    "aliases": sorted(alias for alias, target in wanted.aliases.items() if target == name),
                    "load_seconds": state.load_s,
                    "weight_bytes": state.weight_bytes,
                    "in_flight": state.in_flight,
                }
            )
        budget = {
            "max_loaded_models": self.catalog.config.max_loaded_models,
            "max_loaded_bytes": self.catalog.config.max_loaded_bytes,
        }
        return {"models": models, "aliases": wanted.aliases, "budget": budget, "controlled": self.catalog.controlled}

    async def load(self, name: str) -> dict[str, Any]:
        """Load a configured model (the start's path, in each worker of its service) and warm it here; the others
        serve on. Raises with the reason if it failed or was refused."""
        self._check_controlled(name)
        logger.info("admin: load model '%s'", name)
        if not self.catalog.warm_everywhere(name):
            self.catalog.want(name)
            await self._until(lambda: self.catalog.warm_everywhere(name) or self._failed_for_good(name))
        if not self.catalog.warm_everywhere(name):
            state = self.catalog.state_of(name)
            raise errors.ModelUnavailable(f"model '{name}' did not load: {state.reason}", param="model")
        return self._entry(name)

    async def unload(self, name: str) -> dict[str, Any]:
        """Drop a model everywhere; requests naming it then get a 404 until it is loaded again."""
        self._check_controlled(name)
        logger.info("admin: unload model '%s'", name)

        def unwant(models: ModelSet) -> None:
            models.models[name].loaded = False
            models.models[name].on_request = False

        self._change(unwant)
        await self._until(
            lambda: self.catalog.state_of(name).state in ("unloaded", "failed") and self.catalog.gone_everywhere(name)
        )
        return self._entry(name)

    async def point_alias(self, alias: str, name: str) -> dict[str, Any]:
        """Move (or make) an alias onto a loaded model, once every gateway worker serves it: requests arriving from
        then on resolve to it, those in flight finish on the model they started on."""
        self._check_controlled(name)
        logger.info("admin: point alias '%s' at model '%s'", alias, name)
        if alias in self.catalog.registry.kinds:
            raise errors.InvalidRequest(f"'{alias}' is a model's own name, not an alias", param="alias")
        if not self.catalog.wanted().models[name].loaded:
            raise errors.Conflict(f"model '{name}' is not loaded; load it first", param="model")
        await self._until(lambda: self.catalog.warm_everywhere(name) or not self.catalog.wanted().models[name].loaded)
        if not self.catalog.warm_everywhere(name):
            raise errors.Conflict(f"model '{name}' was unloaded before the alias could move", param="model")

        def point(models: ModelSet) -> None:
            models.aliases[alias] = name

        self._change(point)
        return {"alias": alias, "model": name}

    def remove_alias(self, alias: str) -> dict[str, Any]:
        if alias not in self.catalog.wanted().aliases:
            raise errors.NotFound(f"no alias '{alias}'", param="alias")
        logger.info("admin: remove alias '%s'", alias)

        def remove(models: ModelSet) -> None:
            models.aliases.pop(alias, None)

        self._change(remove)
        return {"alias": alias, "deleted": True}

    def _entry(self, name: str) -> dict[str, Any]:
        return next(model for model in self.report()["models"] if model["id"] == name)

    def _check_controlled(self, name: str) -> None:
        if name not in self.catalog.registry.kinds:
            raise errors.UnknownModel(
                f"model '{name}' is not configured here; configured: {list(self.catalog.registry.kinds)}"
            )
        if not self.catalog.registry.done:
            raise errors.NotReady("models are still loading; retry shortly")
        if not self.catalog.controlled:
            raise errors.Conflict(
                "the model services run apart from this gateway (a split topology): change the models through "
                "the deployment's configuration instead (docs/operations.md)"
            )

    def _failed_for_good(self, name: str) -> bool:
        """Failed, and the model services have given up on it (it is no longer wanted)."""
        entry = self.catalog.wanted().models.get(name)
        return self.catalog.state_of(name).state == "failed" and not (entry and entry.loaded)

    async def _until(self, done: Callable[[], bool]) -> None:
        """Wait for the next refreshes until `done`, at most a request's deadline (then a 503)."""
        deadline = self.catalog.deadline()
        while not done():
            if not await self.catalog.next_refresh(deadline):
                raise errors.NotReady("the model services have not finished; see GET /admin/models")

    def _change(self, edit: Callable[[ModelSet], None]) -> None:
        assert self.catalog.shared is not None, "checked by _check_controlled"
        self.catalog.shared.change(edit)
