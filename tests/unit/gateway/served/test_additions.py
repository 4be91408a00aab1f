"""A model entry added at run time is checked before anything changes (gateway/served/additions.py): a bad entry is
the configuration's own 400, naming the field; a body that is no entry, a 400; a server whose model services run
apart (a split topology: no shared files) answers 409, as its admin loads do; a configured model is never removed.
The path through a real server is tests/server/test_model_control.py's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from config import errors
from config.settings import EmbentoConfig, ModelConfig
from gateway.served.models import ServedModels
from gateway.served.registry import ModelRegistry


def served(tmp_path: Any) -> ServedModels:
    """Warm, in no server: nothing is shared with model services."""
    config = EmbentoConfig(models=[ModelConfig(model_id="m", served_model_name="m")], cache_dir=str(tmp_path))
    return ServedModels(config, registry=ModelRegistry({"m": "embed"}, done=True))


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"model_id": "x", "pooling": "median"}, "pooling", "pooling: "),
        ({"model_id": "x", "load": "sometimes"}, "load", "load: "),
        ({"model_id": "x", "keep_alive": "soon"}, "keep_alive", "keep_alive: "),
        (["not", "an", "entry"], None, "the body must be a model entry"),
    ],
)
def test_a_bad_entry_is_a_400_naming_its_field(tmp_path, body, param, says):
    with pytest.raises(errors.InvalidRequest) as refused:
        asyncio.run(served(tmp_path).additions.add(body))
    assert refused.value.param == param and says in refused.value.message, refused.value.message


def test_in_a_split_topology_an_add_is_a_409(tmp_path):
    with pytest.raises(errors.Conflict, match="split topology"):
        asyncio.run(served(tmp_path).additions.add({"model_id": "x", "served_model_name": "x"}))


def test_a_configured_model_is_not_removed(tmp_path):
    with pytest.raises(errors.Conflict, match=r"configured \(embento.yaml\).*unload it"):
        asyncio.run(served(tmp_path).additions.remove("m"))
    with pytest.raises(errors.UnknownModel, match="no model 'x' was added"):
        asyncio.run(served(tmp_path).additions.remove("x"))
