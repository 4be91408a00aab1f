"""Models added to a server at run time, and removed again: `POST /admin/models` with a model entry, `DELETE
/admin/models/{name}` (gateway/http/admin.py routes onto them).

An entry is validated as `models:` in embento.yaml is (`ModelConfig`: the same 400s, naming the field), its kind
told as the start tells it, and refused with a 409 when no model service of this server runs that kind, when its
name or an alias is taken, or in a split topology. This worker loads its preprocessor first (a checkpoint whose
tokenizer does not load is a 400 and nothing changes); then the entry joins the wanted set (kept across restarts
with it: server_state/kept_models.py), and the call answers once every gateway worker serves the model. A load
that fails takes the entry back out: an add either serves or changes nothing. A configured model is never removed
(the configuration is its owner: a 409 says to unload it instead).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from config import errors
from config.settings import ModelConfig
from gateway.error_responses import describe_validation
from gateway.served.admin import ADMIN, ModelAdmin
from gateway.served.registry import ModelRegistry
from gateway.served.states import ModelStates
from gateway.served.wanted import WantedModels
from gateway.served.warm_flags import WarmFlags
from gateway.served.warmup import Warmer
from models.base import Kind
from models.kinds import KIND_SPECS, model_kind, spec
from server_state.model_set import ADDED_SLOTS, ModelSet

logger = logging.getLogger(__name__)


class Additions:
    """Adds and removes the models not in the configuration, through the admin operations' waits."""

    def __init__(
        self,
        admin: ModelAdmin,
        registry: ModelRegistry,
        wanted: WantedModels,
        states: ModelStates,
        flags: WarmFlags,
        services: Collection[str],
    ) -> None:
        """`services`: the model services this server runs."""
        self._admin = admin
        self._registry = registry
        self._wanted = wanted
        self._states = states
        self._flags = flags
        self._services = frozenset(services)
        self.warming: Warmer | None = None  # the worker's, once it starts (`ServedModels.start`)

    async def add(self, body: object) -> dict[str, Any]:
        """Register and load a model entry in the model service of its kind; its report entry once every gateway
        worker serves it. A 503 with the reason when its load failed (and it is not added), or past
        `request_timeout_s` while it still loads (and it stays: GET /admin/models follows it)."""
        settings = _entry(body)
        name = settings.served_model_name
        self._admin.check_ready()
        kind = await self._kind(settings)
        _check_free(self._wanted.read(), settings, self._registry.configured)
        await self._prepare(settings, kind)
        try:
            self._wanted.change(lambda models: self._add(models, settings))
        except BaseException:
            self._forget(name)
            raise
        await self._admin.until(lambda: self._flags.everywhere(name) or self._admin.failed_for_good(name))
        if not self._flags.everywhere(name):
            reason = self._states.of(name).reason
            self._wanted.change(lambda models: self._remove(models, name))
            raise errors.ModelUnavailable(f"model '{name}' did not load: {reason}; it was not added", param="model")
        logger.info("admin: model '%s' added (kind %s), asked by %s", name, kind, ADMIN)
        return self._admin.entry(name)

    async def remove(self, name: str) -> dict[str, Any]:
        """Unload a model added at run time everywhere, then forget it (and its aliases): a 404 from then on."""
        if name in self._registry.configured:
            raise errors.Conflict(
                f"model '{name}' is configured (embento.yaml), not added at run time: unload it (POST "
                f"/admin/models/{name}/unload), or remove it from the configuration",
                param="model",
            )
        if name not in self._wanted.read().added:
            added = list(self._wanted.read().added)
            raise errors.UnknownModel(f"no model '{name}' was added at run time; added: {added}", param="model")
        await self._admin.unload(name)
        self._wanted.change(lambda models: self._remove(models, name))
        logger.info("admin: model '%s' removed, asked by %s", name, ADMIN)
        return {"id": name, "deleted": True}

    async def _kind(self, settings: ModelConfig) -> Kind:
        """The entry's kind, as the start tells it (configured, or declared by the checkpoint), run by a model
        service of this server."""
        try:
            kind = await asyncio.to_thread(model_kind, settings)
        except errors.EmbentoError as exc:
            raise errors.InvalidRequest(exc.message, param="kind" if settings.kind != "auto" else "model_id") from None
        except Exception as exc:  # the checkpoint cannot be found or read: its id is what to fix
            raise errors.InvalidRequest(f"model_id: the checkpoint cannot be read: {exc}", param="model_id") from None
        if spec(kind).model_service not in self._services:
            runs = sorted(k for k, kind_spec in KIND_SPECS.items() if kind_spec.model_service in self._services)
            raise errors.Conflict(
                f"model '{settings.served_model_name}' is a {kind} model, run by the {spec(kind).model_service} "
                f"service, which this server does not run; the kinds it runs: {runs}",
                param="kind",
            )
        return kind

    async def _prepare(self, settings: ModelConfig, kind: Kind) -> None:
        """This worker's preprocessor for the model: a checkpoint whose tokenizer or processor does not load is
        refused before anything is wanted."""
        assert self.warming is not None, "added only in a started gateway worker"
        try:
            await asyncio.to_thread(self.warming.prepare, settings, kind)
        except Exception as exc:
            detail = exc.message if isinstance(exc, errors.EmbentoError) else f"{type(exc).__name__}: {exc}"
            raise errors.InvalidRequest(
                f"model_id: its tokenizer or processor did not load: {detail}", param="model_id"
            ) from None

    def _forget(self, name: str) -> None:
        if self.warming is not None and name not in self._registry.kinds:
            self.warming.forget(name)

    def _add(self, models: ModelSet, settings: ModelConfig) -> None:
        """Under the set's lock: checked again (another worker may have added the name), added."""
        _check_free(models, settings, self._registry.configured)
        models.add(settings, ADMIN)

    def _remove(self, models: ModelSet, name: str) -> None:
        if name in models.added:
            models.remove(name)


def _entry(body: object) -> ModelConfig:
    """The body as a model entry, validated as the configuration's are: a 400 naming the first field refused."""
    if not isinstance(body, dict):
        raise errors.InvalidRequest('the body must be a model entry: {"model_id": "...", "served_model_name": "..."}')
    try:
        return ModelConfig.model_validate(body)
    except ValidationError as exc:
        message, field = describe_validation(exc.errors()[0])
        raise errors.InvalidRequest(message, param=field) from None


def _check_free(models: ModelSet, settings: ModelConfig, configured: Collection[str]) -> None:
    """A 409 when the entry's name or an alias already names a model or an alias, or no slot is left."""
    name = settings.served_model_name
    taken = set(models.models) | set(models.aliases) | set(configured)
    if name in taken:
        raise errors.Conflict(f"'{name}' already names a model or an alias", param="served_model_name")
    if clashing := sorted(alias for alias in settings.aliases if alias in taken or alias == name):
        raise errors.Conflict(f"aliases {clashing} already name a model or an alias", param="aliases")
    if len(models.added) >= ADDED_SLOTS:
        raise errors.Conflict(f"{ADDED_SLOTS} models are added at run time already: remove one first")
