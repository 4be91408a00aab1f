"""The wanted model set every process of a server shares (server_state/model_set.py), and durations as written."""

from __future__ import annotations

import pytest

from config.durations import seconds_or_forever
from config.errors import ConfigError
from config.settings import EmbentoConfig, ModelConfig, load_config
from server_state.model_set import ModelSet, ModelStatus, SharedModelSet


@pytest.mark.parametrize(
    ("written", "seconds"),
    [(90, 90.0), ("90", 90.0), ("30s", 30.0), ("5m", 300.0), ("1.5h", 5400.0), ("250ms", 0.25), (0, 0.0)],
)
def test_durations_read_as_seconds(written, seconds):
    assert seconds_or_forever(written) == seconds


@pytest.mark.parametrize("written", [None, "", "forever", -1, "-1", float("inf")])
def test_forever_is_none(written):
    assert seconds_or_forever(written) is None


@pytest.mark.parametrize("written", ["soon", "5 minutes", True, [5]])
def test_an_unreadable_duration_is_refused_by_name(written):
    with pytest.raises(ValueError, match="a duration is seconds"):
        seconds_or_forever(written)


def test_the_configured_set_holds_eager_models_and_the_aliases():
    config = EmbentoConfig(
        models=[
            ModelConfig(model_id="a", aliases=["prod", "stable"]),
            ModelConfig(model_id="b", load="lazy", keep_alive="5m"),
        ]
    )
    wanted = ModelSet.configured(config)
    assert {name: (w.loaded, w.keep_alive_s) for name, w in wanted.models.items()} == {
        "a": (True, None),
        "b": (False, 300.0),
    }
    assert wanted.resolve("prod") == "a" and wanted.resolve("b") == "b"
    assert ModelSet.from_json(wanted.to_json()) == wanted


def test_an_alias_may_name_one_model_and_no_model(tmp_path):
    (tmp_path / "embento.yaml").write_text("models:\n- {model_id: a, aliases: [b]}\n- {model_id: b}\n")
    with pytest.raises(ConfigError, match=r"repeated: \['b'\]"):
        load_config({}, cwd=tmp_path)


def test_changes_are_versioned_and_every_reader_sees_them(tmp_path):
    config = EmbentoConfig(models=[ModelConfig(model_id="a"), ModelConfig(model_id="b", load="lazy")])
    writer, reader = SharedModelSet(tmp_path, "x-", config), SharedModelSet(tmp_path, "x-", config)
    assert reader.read().version == 0 and not reader.read().models["b"].loaded

    def load_b(models: ModelSet) -> None:
        models.models["b"].loaded = True

    assert writer.change(load_b).version == 1
    assert reader.read().models["b"].loaded and reader.read().version == 1
    writer.write_status("TextEmbedder-1", {"b": ModelStatus("loaded", load_s=1.5, weight_bytes=10)})
    writer.write_status("TextEmbedder-2", {"b": ModelStatus("loading")})
    assert reader.statuses() == {
        "TextEmbedder-1": {"b": ModelStatus("loaded", load_s=1.5, weight_bytes=10)},
        "TextEmbedder-2": {"b": ModelStatus("loading")},
    }
