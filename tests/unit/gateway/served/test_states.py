"""One model's state across the workers of its model service (gateway/served/states.py's `server_state`): loaded
only once every worker holds it, and a failure, a load or an unload in any worker is the model's. Which models a
request may be served by (loaded, or loadable on demand), the rule readiness follows, over the real shared files."""

from __future__ import annotations

import asyncio
from pathlib import Path

from config.settings import EmbentoConfig, ModelConfig
from gateway.served.models import ServedModels
from gateway.served.registry import ModelRegistry
from gateway.served.states import server_state
from gateway.shared_memory import SharedCounters
from gateway.startup.lifecycle import WARM_WORKERS, Lifecycle
from models.base import ModelInfo
from server_state.model_set import ModelSet, ModelStatus, SharedModelSet
from tests.unit.gateway.fake_engine import INFOS

INFO = next(iter(INFOS.values())).to_dict()


def test_no_worker_reporting_is_no_state():
    assert server_state([]) is None  # a split topology's gateway sees no status files


def test_loaded_once_every_worker_holds_it():
    both = server_state([ModelStatus("loaded", info=INFO, load_s=1.0), ModelStatus("loaded", info=INFO)])
    assert both is not None and both.state == "loaded" and both.info is not None and both.load_s == 1.0
    one = server_state([ModelStatus("loaded", info=INFO), ModelStatus("loading")])
    assert one is not None and one.state == "loading" and one.info is None


def test_a_failure_in_any_worker_is_the_models_with_its_reason():
    state = server_state([ModelStatus("loaded", info=INFO), ModelStatus("failed", "out of memory", refused=True)])
    assert state is not None and (state.state, state.reason, state.refused) == ("failed", "out of memory", True)
    unloaded = server_state([ModelStatus("unloaded", "idle"), ModelStatus("loaded", info=INFO)])
    assert unloaded is not None and (unloaded.state, unloaded.reason) == ("unloaded", "idle")


class Served:
    """The served models over real shared files in a folder, as a gateway worker sees them: `a` eager, `b` lazy, both
    reported unloaded by their model service (nothing loaded), the registry's warm-up done."""

    def __init__(self, folder: Path) -> None:
        lazy = ModelConfig(model_id="b", served_model_name="b", load="lazy")
        config = EmbentoConfig(models=[ModelConfig(model_id="a", served_model_name="a"), lazy])
        self.registry = ModelRegistry({"a": "embed", "b": "embed"}, done=True)
        self.shared = SharedModelSet(folder, "test-", config)
        self.models = ServedModels(config, registry=self.registry)
        self.lifecycle = Lifecycle(
            self.registry, SharedCounters([WARM_WORKERS]), servable=self.models.requests.servable
        )
        self.report(a=ModelStatus("unloaded", "idle"), b=ModelStatus("unloaded"))
        self.change("a", loaded=False)  # evicted: a request loads it again

    def report(self, **statuses: ModelStatus) -> None:
        self.shared.write_status("TextEmbedder-1", statuses)

    def change(self, name: str, **wanted: object) -> None:
        def edit(models: ModelSet) -> None:
            for field, value in wanted.items():
                setattr(models.models[name], field, value)

        self.shared.change(edit)

    async def refreshed(self) -> None:
        """Once the reconciler has read the files again (a pass begun after this call)."""
        refreshes = self.models.refreshes
        for _ in range(2):
            assert await refreshes.next(refreshes.deadline())


class NeverWarmed:
    """No model is reported loaded, nor added."""

    async def __call__(self, info: ModelInfo) -> None:
        raise AssertionError("no model is reported loaded")

    def prepare(self, settings: ModelConfig, kind: str) -> None:
        raise AssertionError("no model is added")

    def forget(self, name: str) -> None:
        raise AssertionError("no model is removed")


def test_a_model_a_request_may_load_counts_as_servable_and_one_the_admin_unloaded_does_not(tmp_path):
    async def scenario() -> None:
        served = Served(tmp_path)
        served.models.start(NeverWarmed(), {}, {}, stop_server=print, shared=served.shared)
        try:
            await served.refreshed()
            # Nothing loaded, the eager model evicted: both may be loaded by a request, so the server is ready.
            assert served.models.requests.servable() == ["a", "b"] and await served.lifecycle.is_ready()
            served.change("a", on_request=False)  # unloaded by the admin API: a 404 until loaded again
            assert served.models.requests.servable() == ["b"] and await served.lifecycle.is_ready()
            served.change("b", on_request=False)
            assert served.models.requests.servable() == [] and not await served.lifecycle.is_ready()
            served.change("b", on_request=True)
            served.report(a=ModelStatus("unloaded"), b=ModelStatus("failed", "no room", refused=True))
            await served.refreshed()
            assert served.models.requests.servable() == ["b"]  # refused by the budget then: a request tries again
            served.report(a=ModelStatus("unloaded"), b=ModelStatus("failed", "its weights are corrupt"))
            await served.refreshed()
            assert served.models.requests.servable() == [] and not await served.lifecycle.is_ready()
        finally:
            served.models.stop()

    asyncio.run(scenario())
