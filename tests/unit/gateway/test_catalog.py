"""One model's state across the workers of its model service (gateway/catalog.py's `server_state`): loaded only once
every worker holds it, and a failure, a load or an unload in any worker is the model's."""

from __future__ import annotations

from config.model_set import ModelStatus
from gateway.catalog import server_state
from tests.unit.gateway.fake_engine import INFOS

INFO = next(iter(INFOS.values())).to_dict()


def test_no_worker_reporting_is_no_state():
    assert server_state([]) is None  # a split topology's gateway sees no status files


def test_loaded_once_every_worker_holds_it():
    both = server_state([ModelStatus("loaded", info=INFO, load_s=1.0, in_flight=2), ModelStatus("loaded", info=INFO)])
    assert both is not None and both.state == "loaded" and both.info is not None and both.in_flight == 2
    one = server_state([ModelStatus("loaded", info=INFO), ModelStatus("loading")])
    assert one is not None and one.state == "loading" and one.info is None


def test_a_failure_in_any_worker_is_the_models_with_its_reason():
    state = server_state([ModelStatus("loaded", info=INFO), ModelStatus("failed", "out of memory", refused=True)])
    assert state is not None and (state.state, state.reason, state.refused) == ("failed", "out of memory", True)
    unloaded = server_state([ModelStatus("unloaded", "idle"), ModelStatus("loaded", info=INFO)])
    assert unloaded is not None and (unloaded.state, unloaded.reason) == ("unloaded", "idle")
