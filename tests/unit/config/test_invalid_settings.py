"""A refused configuration is one line per setting naming where it came from, the value and what the setting takes
(config/invalid_settings.py); never pydantic's report, and never a secret's value. The flags' own lines:
tests/unit/commands/test_cli.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from config.invalid_settings import InvalidSettings
from config.settings import load_config


def refusal(tmp_path: Path, data: dict | None = None, **env: str) -> list[str]:
    if data is not None:
        (tmp_path / "embento.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(InvalidSettings) as caught:
        load_config(env, cwd=tmp_path)
    assert caught.value.message == "\n".join(caught.value.lines())
    assert "pydantic" not in caught.value.message and "input_value" not in caught.value.message
    return caught.value.lines()


def test_a_file_setting_is_named_by_its_place_in_the_file(tmp_path):
    file = tmp_path / "embento.yaml"
    data = {"models": [{"model_id": "a/x"}, {"model_id": "b/y", "backend": "foo", "batch_size": "many"}]}
    assert refusal(tmp_path, data) == [
        f"invalid configuration: models[1].backend in {file} is 'foo'; it takes auto, torch, onnx or ctranslate2",
        f"invalid configuration: models[1].batch_size in {file} is 'many'; it takes a whole number",
    ]
    assert refusal(tmp_path, {"cache": {"ttl_s": -1}, "max_request_bytes": 10}) == [
        f"invalid configuration: max_request_bytes in {file} is 10; it takes 1024 or more",
        f"invalid configuration: cache.ttl_s in {file} is -1; it takes 1 or more",
    ]


def test_an_unknown_key_is_named_with_the_setting_it_may_have_meant(tmp_path):
    file = tmp_path / "embento.yaml"
    assert refusal(tmp_path, {"models": [{"model_id": "a/x", "poolin": "cls"}], "zzz": 1}) == [
        f"invalid configuration: models[0].poolin in {file}: not a setting (did you mean pooling?)",
        f"invalid configuration: zzz in {file}: not a setting",
    ]


def test_a_variable_is_named_with_its_setting(tmp_path):
    assert refusal(tmp_path, EMBENTO_LIMITS_ON_STORE_ERROR="maybe", EMBENTO_MODEL_ID="a;b", EMBENTO_DTYPE="x;int8") == [
        "invalid configuration: EMBENTO_DTYPE (dtype of model 1) is 'x'; "
        "it takes auto, float32, float16, bfloat16, int8 or int8_float16",
        "invalid configuration: dtype 'int8' is not available with backend 'auto' (model 'b'); "
        "it takes ['auto', 'float32', 'float16', 'bfloat16']",
        "invalid configuration: EMBENTO_LIMITS_ON_STORE_ERROR (limits.on_store_error) is 'maybe'; "
        "it takes open or closed",
    ]


def test_a_secret_is_never_shown(tmp_path):
    data = {"cache": {"redis_url": {"password": "s3cret"}}, "admin_key": 123456789, "api_key": [" "]}
    lines = refusal(tmp_path, data)
    assert len(lines) == 3 and not any("s3cret" in line or "123456789" in line for line in lines)
