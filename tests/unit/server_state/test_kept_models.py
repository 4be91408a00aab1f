"""The wanted set kept across restarts (server_state/kept_models.py): written whole at each change of the shared set
(a new file replacing the old, never rewritten in place, no temporary left), read back as the same set, and
reconciled with the configuration at the start, one rule per test: what someone asked for holds, what nobody did
follows the configuration, a model the configuration dropped is dropped (an INFO line), a newly configured one
starts as configured, an alias whose model is gone is dropped (an INFO line). Every file that cannot be trusted is
refused with a ConfigError naming the file and what is wrong."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from config.errors import ConfigError
from config.settings import EmbentoConfig, ModelConfig
from server_state.kept_models import KEPT_FILE, kept_path, read_kept, write_kept
from server_state.model_set import ModelSet, Pins, SharedModelSet, Wanted, added_column, pinned_names

CONFIG = EmbentoConfig(
    models=[
        ModelConfig(model_id="configured", served_model_name="base", aliases=["prod"]),
        ModelConfig(model_id="other", served_model_name="spare", load="lazy", keep_alive="5m"),
    ]
)


def added(name: str, **settings: object) -> ModelConfig:
    return ModelConfig.model_validate({"model_id": f"/models/{name}", "served_model_name": name, **settings})


def kept_set(tmp_path: Path, config: EmbentoConfig = CONFIG) -> tuple[SharedModelSet, Path]:
    """A shared set that keeps each change, as a server's does (`server_model_set`), and its kept file."""
    path = tmp_path / "cache" / KEPT_FILE
    return SharedModelSet(tmp_path, "test-", config, read_kept(path, config), lambda m: write_kept(path, m)), path


def changed_by_everyone(models: ModelSet) -> None:
    """An admin unload, a lazy model loaded by the admin, an alias moved and one made, a request's keep_alive, an
    added model with its alias."""
    models.models["base"] = Wanted(False, False, None, asked_by="admin")
    models.models["spare"] = Wanted(True, True, 0.0, asked_by="admin", keep_alive_by="tenant 'acme'")
    models.aliases["prod"] = "spare"
    models.aliases["new"] = "base"
    models.add(added("tiny", aliases=["small"], keep_alive="1m"), "admin")


def test_the_file_is_under_cache_dir(tmp_path):
    assert kept_path(CONFIG.model_copy(update={"cache_dir": str(tmp_path)})) == tmp_path / KEPT_FILE


def test_a_missing_file_starts_the_configured_set(tmp_path):
    assert read_kept(tmp_path / KEPT_FILE, CONFIG) == ModelSet.configured(CONFIG)


def test_each_change_is_kept_whole_and_read_back_as_the_same_set(tmp_path):
    shared, path = kept_set(tmp_path)
    assert not path.exists()  # nothing written until something changes
    now = shared.change(changed_by_everyone)
    first = path.stat().st_ino
    now.version = 0  # the count of one run's changes is not kept
    assert read_kept(path, CONFIG) == now
    written = json.loads(path.read_text())
    assert written["format"] == 2 and written["aliases"] == {"prod": "spare", "new": "base", "small": "tiny"}
    assert written["models"]["base"] == {
        "loaded": False,
        "on_request": False,
        "keep_alive_s": None,
        "asked_by": "admin",
        "keep_alive_by": None,
    }
    assert written["added"] == [
        {"model_id": "/models/tiny", "served_model_name": "tiny", "aliases": ["small"], "keep_alive": 60.0}
    ]  # the fields sent, not every default: a later default applies at the next start
    shared.change(lambda models: models.remove("tiny"))
    assert path.stat().st_ino != first, "a new file replaces the old one: a reader never sees half of it"
    assert "tiny" not in read_kept(path, CONFIG).models and read_kept(path, CONFIG).added == {}
    assert sorted(os.listdir(path.parent)) == [KEPT_FILE]  # no temporary file left beside it


def test_what_nobody_asked_for_follows_the_configuration(tmp_path):
    shared, path = kept_set(tmp_path)
    shared.change(lambda models: models.aliases.pop("new", None))  # written, with every model as configured
    edited = EmbentoConfig(
        models=[
            ModelConfig(model_id="configured", served_model_name="base", load="lazy", keep_alive="1m"),
            ModelConfig(model_id="other", served_model_name="spare"),
        ]
    )
    restarted = read_kept(path, edited)
    assert restarted.models == ModelSet.configured(edited).models  # eager and lazy swapped, keep_alive changed


def test_what_someone_asked_for_holds_over_the_configuration(tmp_path):
    shared, path = kept_set(tmp_path)
    shared.change(changed_by_everyone)
    restarted = read_kept(path, CONFIG)
    assert restarted.models["base"] == Wanted(False, False, None, asked_by="admin")  # unloaded: 404 until loaded
    assert restarted.models["spare"] == Wanted(True, True, 0.0, "admin", "tenant 'acme'")  # lazy, loaded at start
    assert restarted.resolve("prod") == "spare" and restarted.resolve("new") == "base"


def test_a_model_no_longer_configured_is_dropped_with_its_aliases_and_a_line(tmp_path, caplog):
    shared, path = kept_set(tmp_path)
    shared.change(changed_by_everyone)  # `prod` now names `spare`, `new` names `base`
    without_spare = EmbentoConfig(models=[ModelConfig(model_id="configured", served_model_name="base")])
    with caplog.at_level(logging.INFO, logger="server_state.kept_models"):
        restarted = read_kept(path, without_spare)
    assert set(restarted.models) == {"base", "tiny"} and not restarted.models["base"].loaded
    assert restarted.aliases == {"new": "base", "small": "tiny"}
    said = [record.getMessage() for record in caplog.records if record.levelno == logging.INFO]
    assert said == [
        f"{path}: model 'spare' is no longer configured: dropped from the kept models",
        f"{path}: alias 'prod' dropped from the kept models: model 'spare' no longer exists",
    ]


def test_a_newly_configured_model_starts_as_configured_with_its_aliases(tmp_path):
    shared, path = kept_set(tmp_path)
    shared.change(changed_by_everyone)
    grown = EmbentoConfig(
        models=[*CONFIG.models, ModelConfig(model_id="third", served_model_name="fresh", load="lazy", aliases=["f"])]
    )
    restarted = read_kept(path, grown)
    assert restarted.models["fresh"] == Wanted(False, True, None)
    assert restarted.resolve("f") == "fresh" and restarted.resolve("prod") == "spare"  # the kept ones hold too


def test_an_alias_whose_name_is_now_a_model_is_dropped_with_a_line(tmp_path, caplog):
    shared, path = kept_set(tmp_path)
    shared.change(changed_by_everyone)  # `new` names `base`
    renamed = EmbentoConfig(models=[*CONFIG.models, ModelConfig(model_id="third", served_model_name="new")])
    with caplog.at_level(logging.INFO, logger="server_state.kept_models"):
        restarted = read_kept(path, renamed)
    assert restarted.resolve("new") == "new" and restarted.models["new"].loaded
    assert f"{path}: alias 'new' dropped from the kept models: it names a model now" in caplog.messages


def test_the_first_format_is_read_as_the_added_models_alone(tmp_path):
    path = tmp_path / KEPT_FILE
    path.write_text(json.dumps({"format": 1, "models": [{"model_id": "/models/tiny", "aliases": ["small"]}]}))
    restarted = read_kept(path, CONFIG)
    assert list(restarted.added) == ["tiny"] and restarted.models["tiny"].loaded
    assert restarted.aliases == {"prod": "base", "small": "tiny"}
    assert {name: restarted.models[name] for name in ("base", "spare")} == ModelSet.configured(CONFIG).models


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"format": 2, "models": {', "not valid JSON"),
        ('{"models": {}}', "format: Field required"),
        ('{"format": 2, "models": []}', "models: Input should be a valid dictionary"),
        ('{"format": 2, "models": {"base": {"loaded": "maybe"}}}', "models.base.loaded"),
        ('{"format": 2, "aliases": {"prod": 3}}', "aliases.prod"),
        ('{"format": 2, "added": [{"model_id": "x", "pooling": "median"}]}', "added[0].pooling"),
        ('{"format": 2, "added": [{"model_id": "x", "served_model_name": "prod"}]}', "['prod']"),
        ('{"format": 2, "added": [{"model_id": "a"}, {"model_id": "b", "aliases": ["a"]}]}', "added[1] names ['a']"),
        ('{"format": 1, "models": [{"model_id": "x", "pooling": "median"}]}', "added[0].pooling"),
    ],
)
def test_a_file_that_cannot_be_trusted_stops_the_start_with_its_reason(tmp_path, text, says):
    path = tmp_path / KEPT_FILE
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        read_kept(path, CONFIG)
    assert str(path) in refused.value.message and says in refused.value.message, refused.value.message
    assert "remove it to start with the configured models alone" in refused.value.message
    assert path.read_text() == text  # never rewritten


def test_the_kept_added_models_start_wanted_each_in_its_own_column(tmp_path):
    shared, path = kept_set(tmp_path)
    shared.change(lambda models: [models.add(model, "admin") for model in (added("tiny"), added("other2"))])
    restarted = SharedModelSet(tmp_path / "next", "test-", CONFIG, read_kept(path, CONFIG)).read()
    assert list(restarted.added) == ["tiny", "other2"] and restarted.models["tiny"].loaded
    assert [restarted.column(name) for name in ("base", "tiny", "other2")] == ["base", added_column(0), added_column(1)]
    assert restarted.added["tiny"].config() == added("tiny")
    assert added_column(0) in pinned_names(CONFIG)
    with Pins(CONFIG, shared).locked() as pinned:
        assert pinned("tiny") == 0 and pinned("gone") == 0  # one never added pins nothing
