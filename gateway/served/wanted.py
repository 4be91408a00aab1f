"""The server's wanted set (server_state/model_set.py) as one gateway worker reads and changes it."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from config.durations import duration_text
from config.settings import EmbentoConfig, ModelConfig
from server_state.model_set import ModelSet, SharedModelSet

logger = logging.getLogger(__name__)


class WantedModels:
    """Which models the server should hold, and the aliases: the server's shared set once `attach`ed in a gateway
    worker of a server; the configured set, fixed, outside one (the engine in tests, a split topology's files
    unseen)."""

    def __init__(self, config: EmbentoConfig) -> None:
        self._config = config
        self._shared: SharedModelSet | None = None

    def attach(self, shared: SharedModelSet | None) -> None:
        self._shared = shared

    @property
    def shared(self) -> bool:
        """Whether this worker shares the server's set (else nothing is loaded or unloaded at run time)."""
        return self._shared is not None

    def read(self) -> ModelSet:
        """The set now, not to be changed in place: read afresh (a stat, unless it changed) for each request."""
        return self._shared.read() if self._shared is not None else ModelSet.configured(self._config)

    def resolve(self, name: str) -> str:
        """The model a name (an alias, or a model's own name) stands for now."""
        return self.read().resolve(name)

    def settings(self, name: str) -> ModelConfig | None:
        """A model's entry: in the configuration, or added at run time (None for a name that is no model's)."""
        configured = self._config.model(name)
        if configured is not None:
            return configured
        added = self.read().added.get(name)
        return added.config() if added is not None else None

    def entries(self) -> list[ModelConfig]:
        """Every model's entry: the configured ones in order, then those added at run time."""
        return [*self._config.models, *(added.config() for added in self.read().added.values())]

    def column(self, name: str) -> str:
        """A model's column in the tables the gateway workers share (pins, warm flags)."""
        return self.read().column(name)

    def change(self, edit: Callable[[ModelSet], None]) -> ModelSet:
        """`edit` applied to the server's set under its lock, written whole for every process to read."""
        assert self._shared is not None, "the set is changed only in a server's gateway worker"
        return self._shared.change(edit)

    def want(self, name: str, by: str) -> None:
        """A model wanted loaded, and loadable by requests again, asked by `by` (`caller_id`, or the admin)."""

        def want(models: ModelSet) -> None:
            entry = models.models[name]
            entry.loaded = entry.on_request = True
            entry.asked_by = by

        self.change(want)

    def keep_alive(self, name: str, seconds: float | None, by: str) -> None:
        """A request's `keep_alive` for its model from now on (`math.inf`: forever; None: it gave none): one INFO
        line when it changes what was set."""
        if self._shared is None or seconds is None:
            return
        keep = None if math.isinf(seconds) else seconds
        entry = self.read().models.get(name)
        if entry is None or entry.keep_alive_s == keep:  # no longer wanted at all: removed as it was answered
            return
        was: list[float | None] = []

        def set_keep_alive(models: ModelSet) -> None:
            changed = models.models[name]
            was.append(changed.keep_alive_s)
            changed.keep_alive_s, changed.keep_alive_by = keep, by

        self.change(set_keep_alive)
        logger.info(
            "model '%s' keep_alive set to %s by %s (it was %s)", name, duration_text(keep), by, duration_text(was[0])
        )
