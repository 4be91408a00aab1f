"""The served models of one gateway worker, assembled: one owner for the models at run time."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from config.settings import EmbentoConfig
from gateway.served.additions import Additions
from gateway.served.admin import ModelAdmin
from gateway.served.reconciler import Reconciler, Refreshes
from gateway.served.registry import ModelRegistry
from gateway.served.requests import RequestModels
from gateway.served.states import ModelStates
from gateway.served.wanted import WantedModels
from gateway.served.warm_flags import WarmFlags
from gateway.served.warmup import Warmer, Warmup, reported_infos
from gateway.shared_memory import SharedCounters
from models.kinds import model_kind, spec
from server_state.kept_models import kept_path, read_kept
from server_state.model_set import PINS_FILE, SharedModelSet, pinned_names


class ServedModels:
    """What a gateway worker serves at run time, and its one owner: the registry (`registry`, read by all, written
    by the reconciler alone), the wanted set (`wanted`), the model services' states (`states`), requests' side
    (`requests`), the admin operations (`admin`, and `additions`: models added at run time), and the reconciler that
    `start` runs in the worker."""

    def __init__(
        self,
        config: EmbentoConfig,
        workers: Callable[[], int] = lambda: 1,
        registry: ModelRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`workers`: how many gateway workers the server runs (asked once one serves); `registry`: one already
        built (by default the configured models', cold)."""
        self._config = config
        self.registry = registry or ModelRegistry({m.served_model_name: model_kind(m) for m in config.models})
        names = pinned_names(config)
        self.wanted = WantedModels(config)
        self.states = ModelStates(self.registry)
        self.refreshes = Refreshes(config.request_timeout_s, clock)
        self._pins = SharedCounters(names, PINS_FILE)
        self.flags = WarmFlags(names, workers, self.wanted.column)
        self.requests = RequestModels(self.registry, self.wanted, self.states, self.refreshes, self._pins)
        budget = {"max_loaded_models": config.max_loaded_models, "max_loaded_bytes": config.max_loaded_bytes}
        self.admin = ModelAdmin(
            self.registry, self.wanted, self.states, self.requests, self.flags, self.refreshes, budget
        )
        # the kept wanted set: a file that cannot be trusted stops the start here, at import, with its reason
        read_kept(kept_path(config), config)
        services = {spec(kind).model_service for kind in self.registry.kinds.values()}
        self.additions = Additions(self.admin, self.registry, self.wanted, self.states, self.flags, services)
        self._reconciler: Reconciler | None = None

    def start(
        self,
        warming: Warmer,
        clients: Mapping[str, Any],
        failed_here: Mapping[str, str],
        stop_server: Callable[[str], None],
        shared: SharedModelSet | None,
        warm_then: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        """In the gateway worker, once its model services' clients exist: the start's warm-up (`warming` each model
        the services report, under `allow_partial`'s policy), then `warm_then`, then the status files in `shared`
        (None outside a server: nothing changes at run time), models added at run time prepared by `warming` too."""
        self._pins.open()  # now, in the worker: its rows start at zero
        self.flags.open()
        self.wanted.attach(shared)
        self.states.attach(shared)
        # the models the wanted set holds at the start: the configured eager ones, or as kept across a restart
        started = self.wanted.read().models
        eager = [name for name in self.registry.kinds if name in started and started[name].loaded]
        warmup = Warmup(reported_infos(clients, failed_here, eager), warming, self._config.allow_partial, stop_server)
        self.additions.warming = warming
        self._reconciler = Reconciler(self.registry, self.states, self.flags, self.refreshes, warming, self.wanted)
        self._reconciler.start(warmup, shared is not None, warm_then)

    def stop(self) -> None:
        if self._reconciler is not None:
            self._reconciler.stop()
