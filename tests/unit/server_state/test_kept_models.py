"""The models added at run time, kept across restarts (server_state/kept_models.py): the file written whole (a new
file replacing the old, never rewritten in place, no temporary left), read back as the same entries in the same
order, and every file that cannot be trusted (not JSON, another shape, an entry the configuration's rules refuse, a
name the configuration also gives) refused with a ConfigError naming the file and what is wrong. The wanted set
starts with the kept models wanted loaded, each in a column of its own."""

from __future__ import annotations

import json
import os

import pytest

from config.errors import ConfigError
from config.settings import EmbentoConfig, ModelConfig
from server_state.kept_models import KEPT_FILE, kept_path, read_kept, write_kept
from server_state.model_set import ModelSet, Pins, SharedModelSet, added_column, pinned_names

CONFIG = EmbentoConfig(models=[ModelConfig(model_id="configured", served_model_name="base", aliases=["prod"])])


def added(name: str, **settings: object) -> ModelConfig:
    return ModelConfig.model_validate({"model_id": f"/models/{name}", "served_model_name": name, **settings})


def test_the_file_is_under_cache_dir(tmp_path):
    assert kept_path(CONFIG.model_copy(update={"cache_dir": str(tmp_path)})) == tmp_path / KEPT_FILE


def test_a_missing_file_keeps_nothing(tmp_path):
    assert read_kept(tmp_path / KEPT_FILE, CONFIG) == []


def test_written_whole_and_read_back_in_order(tmp_path):
    path = tmp_path / "cache" / KEPT_FILE  # its folder is made
    models = [added("tiny", backend="torch", aliases=["small"], keep_alive="5m"), added("other", load="lazy")]
    write_kept(path, models)
    first = path.stat().st_ino
    assert read_kept(path, CONFIG) == models
    assert json.loads(path.read_text())["models"][0] == {
        "model_id": "/models/tiny",
        "served_model_name": "tiny",
        "backend": "torch",
        "aliases": ["small"],
        "keep_alive": 300.0,
    }  # the fields sent, not every default: a later default applies at the next start
    write_kept(path, models[1:])
    assert path.stat().st_ino != first, "a new file replaces the old one: a reader never sees half of it"
    assert read_kept(path, CONFIG) == models[1:]
    assert sorted(os.listdir(path.parent)) == [KEPT_FILE]  # no temporary file left beside it


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"format": 1, "models": [', "not valid JSON"),
        ('{"models": []}', '{"format": 1, "models": [...]}'),
        ('{"format": 1, "models": {"tiny": {}}}', '{"format": 1, "models": [...]}'),
        ('{"format": 1, "models": [{"model_id": "x", "pooling": "median"}]}', "models[0].pooling"),
        ('{"format": 1, "models": [{"model_id": "x", "served_model_name": "prod"}]}', "['prod']"),
        ('{"format": 1, "models": [{"model_id": "a"}, {"model_id": "b", "aliases": ["a"]}]}', "models[1] names ['a']"),
    ],
)
def test_a_file_that_cannot_be_trusted_stops_the_start_with_its_reason(tmp_path, text, says):
    path = tmp_path / KEPT_FILE
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        read_kept(path, CONFIG)
    assert str(path) in refused.value.message and says in refused.value.message, refused.value.message
    assert "remove it to start without the models added at run time" in refused.value.message
    assert path.read_text() == text  # never rewritten


def test_the_wanted_set_starts_with_the_kept_models_wanted_each_in_its_own_column(tmp_path):
    kept = [added("tiny", aliases=["small"]), added("other")]
    shared = SharedModelSet(tmp_path, "test-", CONFIG, kept)
    start = shared.read()
    assert list(start.added) == ["tiny", "other"] and start.models["tiny"].loaded and start.models["other"].loaded
    assert start.aliases == {"prod": "base", "small": "tiny"}
    assert [start.column(name) for name in ("base", "tiny", "other")] == ["base", added_column(0), added_column(1)]
    assert start.added["tiny"].config() == kept[0]
    shared.change(lambda models: models.remove("tiny"))  # through the file: removed, with its alias
    after = ModelSet.from_json((tmp_path / "test-model-set.json").read_text())
    assert list(after.added) == ["other"] and "tiny" not in after.models and after.aliases == {"prod": "base"}
    shared.change(lambda models: models.add(added("third"), "admin"))
    assert shared.read().column("third") == added_column(0)  # the free slot is taken again
    assert added_column(0) in pinned_names(CONFIG)
    with Pins(CONFIG, shared).locked() as pinned:
        assert pinned("third") == 0 and pinned("tiny") == 0  # one removed pins nothing
