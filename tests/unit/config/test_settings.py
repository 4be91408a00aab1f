"""The configuration object: defaults, YAML, environment, validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from config.errors import ConfigError
from config.model_settings import DEFAULT_MODEL_ID
from config.settings import carried, carried_text, load_config, split_list


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "embento.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_defaults_serve_the_packaged_minilm(tmp_path):
    config = load_config({}, cwd=tmp_path)
    assert len(config.models) == 1
    model = config.models[0]
    assert model.model_id == DEFAULT_MODEL_ID and model.served_model_name == DEFAULT_MODEL_ID
    assert (model.backend, model.device, model.dtype, model.trust_remote_code) == ("auto", "auto", "auto", False)
    assert config.max_client_batch_size == 2048 and config.api_keys() == ()


def test_served_name_defaults_to_last_path_part(tmp_path):
    config = load_config({"EMBENTO_MODEL_ID": "BAAI/bge-small-en-v1.5;/data/models/my-model/"}, cwd=tmp_path)
    assert [m.served_model_name for m in config.models] == ["bge-small-en-v1.5", "my-model"]


def test_yaml_file_in_working_directory(tmp_path):
    write(tmp_path, {"api_key": "k", "models": [{"model_id": "a/b", "pooling": "cls", "prompts": {"query": "q: "}}]})
    config = load_config({}, cwd=tmp_path)
    assert config.api_keys() == ("k",)
    assert config.models[0].pooling == "cls" and config.models[0].prompts == {"query": "q: "}


def test_environment_beats_yaml(tmp_path):
    path = write(tmp_path / "", {"models": [{"model_id": "a/b", "batch_size": 8}, {"model_id": "c/d"}]})
    env = {"EMBENTO_CONFIG": str(path), "EMBENTO_BATCH_SIZE": "16", "EMBENTO_MAX_CLIENT_BATCH_SIZE": "100"}
    config = load_config(env, cwd=Path("/"))
    assert [m.batch_size for m in config.models] == [16, 16]
    assert config.max_client_batch_size == 100


def test_per_model_lists_apply_in_order(tmp_path):
    env = {
        "EMBENTO_MODEL_ID": "a/one;b/two;",
        "EMBENTO_SERVED_MODEL_NAME": "x;y",
        "EMBENTO_ENGINE": "torch",
        "EMBENTO_POOLING_METHOD": "mean;cls",
        "EMBENTO_TRUST_REMOTE_CODE": "false;true",
        "EMBENTO_KIND": "auto;rerank",
    }
    config = load_config(env, cwd=tmp_path)
    assert [(m.model_id, m.served_model_name, m.pooling, m.trust_remote_code, m.kind) for m in config.models] == [
        ("a/one", "x", "mean", False, "auto"),
        ("b/two", "y", "cls", True, "rerank"),
    ]


def test_model_id_from_environment_replaces_the_file_models(tmp_path):
    write(tmp_path, {"models": [{"model_id": "file/model"}]})
    config = load_config({"EMBENTO_MODEL_ID": "env/model"}, cwd=tmp_path)
    assert [m.model_id for m in config.models] == ["env/model"]


@pytest.mark.parametrize(
    "env, fragment",
    [
        ({"EMBENTO_MODEL_ID": "a/x;b/y", "EMBENTO_BATCH_SIZE": "1;2;3"}, "3 values for 2 models"),
        ({"EMBENTO_ENGINE": "torch", "EMBENTO_DTYPE": "int8_float16"}, "not available with backend 'torch'"),
        ({"EMBENTO_DEVICE": "gpu"}, "device"),
        ({"EMBENTO_DTYPE": "int4"}, "dtype"),
        ({"EMBENTO_BATCH_SIZE": "0"}, "batch_size"),
        ({"EMBENTO_PASS_BUDGET_MS": "0"}, "pass_budget_ms"),
        ({"EMBENTO_PASS_BUDGET_MS": "soon"}, "pass_budget_ms"),
        ({"EMBENTO_PASS_BUDGET_MS": "60001"}, "pass_budget_ms"),
        ({"EMBENTO_POOLING": "median"}, "pooling"),
        ({"EMBENTO_KIND": "summarize"}, "kind"),
        ({"EMBENTO_MODEL_ID": "a/x;b/x"}, "unique"),
        ({"EMBENTO_CONFIG": "/no/such/file.yaml"}, "not a file"),
    ],
)
def test_invalid_configuration_is_rejected_with_a_clear_message(tmp_path, env, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(env, cwd=tmp_path)


def test_unknown_yaml_keys_are_rejected(tmp_path):
    write(tmp_path, {"models": [{"model_id": "a/b", "poolin": "cls"}]})
    with pytest.raises(ConfigError, match="poolin"):
        load_config({}, cwd=tmp_path)


def test_split_list():
    assert split_list("a;b;") == ["a", "b"]
    assert split_list(" a ; b") == ["a", "b"]
    assert split_list("") == []


def test_store_models_are_named_after_their_store_name_and_take_no_revision():
    config = load_config({"EMBENTO_MODEL_ID": "bentoml://bge-small:abc123;bentoml://other"}, cwd=Path("/"))
    assert [(m.model_id, m.served_model_name) for m in config.models] == [
        ("bentoml://bge-small:abc123", "bge-small"),
        ("bentoml://other", "other"),
    ]
    with pytest.raises(ConfigError, match="its version goes in the tag"):
        load_config({"EMBENTO_MODEL_ID": "bentoml://x", "EMBENTO_REVISION": "main"}, cwd=Path("/"))


def test_api_keys_from_a_list_and_a_file_and_never_in_reprs_or_errors(tmp_path):
    (tmp_path / "keys").write_text("file-key-1\n\n  file-key-2  \n")
    config = load_config(
        {"EMBENTO_API_KEY": "env-key-1;env-key-2", "EMBENTO_API_KEY_FILE": str(tmp_path / "keys")}, cwd=tmp_path
    )
    assert config.api_keys() == ("env-key-1", "env-key-2", "file-key-1", "file-key-2")
    assert "key-1" not in repr(config) and "key-1" not in str(config.model_dump())
    with pytest.raises(ConfigError) as caught:
        load_config({"EMBENTO_API_KEY": "hidden-key;", "EMBENTO_MAX_REQUEST_BYTES": "x"}, cwd=tmp_path)
    assert "hidden-key" not in caught.value.message
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config({"EMBENTO_API_KEY_FILE": str(tmp_path / "missing")}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="empty key"):
        load_config({"EMBENTO_API_KEY": "a; ;b"}, cwd=tmp_path)


def test_tenants_settings_from_yaml_and_environment_without_the_limits_password_in_a_bento(tmp_path):
    write(tmp_path, {"auth": {"keys_file": "/etc/embento/keys.yaml"}, "log": {"access": "json"}})
    url = "redis://:l1mits@redis.internal:6379/3"
    config = load_config(
        {"EMBENTO_LIMITS_REDIS_URL": url, "EMBENTO_LIMITS_ON_STORE_ERROR": "closed", "EMBENTO_API_KEY": "k1;k2"},
        cwd=tmp_path,
    )
    assert (config.auth.keys_file, config.log.access, config.limits.redis()) == ("/etc/embento/keys.yaml", "json", url)
    assert config.limits.on_store_error == "closed" and config.api_keys() == ("k1", "k2")
    assert "l1mits" not in repr(config) and "l1mits" not in carried_text(config) and "k1" not in carried_text(config)
    assert carried(config)["limits"] == {"on_store_error": "closed", "redis_timeout_ms": 50.0}
    with pytest.raises(ConfigError, match="on_store_error"):
        load_config({"EMBENTO_LIMITS_ON_STORE_ERROR": "maybe"}, cwd=tmp_path)


def test_the_cache_from_yaml_and_environment_without_its_password_in_a_bento(tmp_path):
    write(tmp_path, {"models": [{"model_id": "a"}, {"model_id": "b"}], "cache": {"memory_bytes": 1024}})
    url = "redis://:s3cret@redis.internal:6379/2"
    config = load_config(
        {"EMBENTO_CACHE": "true;false", "EMBENTO_CACHE_REDIS_URL": url, "EMBENTO_CACHE_TTL_S": "60"}, cwd=tmp_path
    )
    assert [m.cache for m in config.models] == [True, False]
    assert (config.cache.memory_bytes, config.cache.ttl_s, config.cache.redis()) == (1024, 60, url)
    assert "s3cret" not in repr(config) and "s3cret" not in carried_text(config)
    assert carried(config)["cache"] == {
        "memory_bytes": 1024,
        "ttl_s": 60,
        "redis_timeout_ms": 20.0,
        "share_across_tenants": False,
    }
    assert load_config({}, cwd=tmp_path / "missing").cache.redis() is None
    with pytest.raises(ConfigError, match="redis_timeout_ms"):
        load_config({"EMBENTO_CACHE_REDIS_TIMEOUT_MS": "0"}, cwd=tmp_path)


def test_the_pass_budget_is_per_model_and_auto_is_the_devices():
    from models.batching import pass_budget_ms

    config = load_config({"EMBENTO_MODEL_ID": "a/x;b/y", "EMBENTO_PASS_BUDGET_MS": "25;auto"}, cwd=Path("/nonexistent"))
    assert [model.pass_budget_ms for model in config.models] == [25.0, None]
    assert [pass_budget_ms(model.pass_budget_ms, "cpu") for model in config.models] == [25.0, 30.0]
    assert pass_budget_ms(None, "cuda:0") == 10.0
