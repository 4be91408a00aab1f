"""`embento serve`: flags and variables become one validated configuration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from commands import build_parser, main
from commands.flags import FLAGS, PROJECT_ROOT
from commands.serve import bentoml_command, build_env
from config.settings import load_config


def env_for(argv: list[str], environ: dict[str, str] | None = None, cwd: Path = Path("/")) -> dict[str, str]:
    return build_env(build_parser().parse_args(["serve", *argv]), environ or {}, cwd)


def test_repeated_per_model_flags_follow_model_order():
    env = env_for(
        [
            "--model-id",
            "a/one",
            "--served-model-name",
            "first",
            "--batch-size",
            "8",
            "--model-id",
            "b/two",
            "--served-model-name",
            "second",
            "--batch-size",
            "16",
            "--pooling-method",
            "cls",
            "--trust-remote-code",
        ]
    )
    assert env["EMBENTO_MODEL_ID"] == "a/one;b/two"
    assert env["EMBENTO_SERVED_MODEL_NAME"] == "first;second"
    config = load_config(env, cwd=Path("/"))
    assert [(m.model_id, m.served_model_name, m.batch_size, m.pooling, m.trust_remote_code) for m in config.models] == [
        ("a/one", "first", 8, "cls", True),
        ("b/two", "second", 16, "cls", True),
    ]


def test_engine_is_an_alias_of_backend_and_flags_beat_variables():
    env = env_for(["--engine", "torch", "--device", "cpu"], {"EMBENTO_ENGINE": "onnx", "EMBENTO_DEVICE": "cuda"})
    assert env["EMBENTO_BACKEND"] == "torch" and "EMBENTO_ENGINE" not in env
    config = load_config(env, cwd=Path("/"))
    assert config.models[0].device == "cpu"


def test_variables_apply_when_no_flag_is_given():
    env = env_for([], {"EMBENTO_MODEL_ID": "a/x;b/y", "EMBENTO_DTYPE": "float16", "EMBENTO_API_KEY": "s3"})
    config = load_config(env, cwd=Path("/"))
    assert [m.dtype for m in config.models] == ["float16", "float16"] and config.api_keys() == ("s3",)


def test_switch_flags_take_an_optional_value():
    env = env_for(["--model-id", "a/x", "--model-id", "b/y", "--normalize", "false", "--normalize"])
    assert [m.normalize for m in load_config(env, cwd=Path("/")).models] == [False, True]


def test_server_flags(tmp_path):
    (tmp_path / "embento.yaml").write_text("models: [{model_id: a/b}]\n")
    env = env_for(["--api-key", "k", "--host", "127.0.0.1", "--port", "4000"], cwd=tmp_path)
    assert env["EMBENTO_API_KEY"] == "k"
    assert env["EMBENTO_CONFIG"] == str((tmp_path / "embento.yaml").resolve())
    assert env["BENTOML_DO_NOT_TRACK"] == "True"
    command = bentoml_command(env)
    assert command[1:5] == ["-m", "bentoml", "serve", "service:Gateway"]
    assert command[command.index("--host") + 1] == "127.0.0.1" and command[command.index("--port") + 1] == "4000"
    assert command[command.index("--working-dir") + 1] == str(PROJECT_ROOT)


def test_log_level_becomes_bentomls_verbosity(capsys, monkeypatch):
    assert "--debug" in bentoml_command(env_for(["--log-level", "debug"]))
    assert "--quiet" in bentoml_command(env_for([], {"EMBENTO_LOG_LEVEL": "error"}))
    assert not {"--debug", "--quiet"} & set(bentoml_command(env_for([])))
    monkeypatch.delenv("EMBENTO_CONFIG", raising=False)
    assert main(["serve", "--log-level", "loud"]) == 2
    assert (
        "embento: invalid configuration: --log-level is 'loud'; it takes info, debug or error\n"
        == capsys.readouterr().err
    )


def test_invalid_configuration_exits_2_before_serving(capsys, monkeypatch):
    monkeypatch.delenv("EMBENTO_CONFIG", raising=False)
    assert main(["serve", "--model-id", "a/x", "--batch-size", "1", "--batch-size", "2", "--batch-size", "3"]) == 2
    assert "3 values for 1 models" in capsys.readouterr().err
    assert main(["serve", "--backend", "onnx", "--dtype", "float16"]) == 2
    assert "not available with backend 'onnx'" in capsys.readouterr().err


def test_help_documents_every_flag_and_its_variable():
    result = subprocess.run(
        [sys.executable, "-m", "commands", "serve", "--help"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for flag in FLAGS:
        for name in flag.names:
            assert name in result.stdout
        assert f"EMBENTO_{flag.env}" in result.stdout.replace("\n", " ").replace("  ", "")


def test_gateway_workers_and_device_sized_batches_from_flags_and_variables():
    config = load_config(env_for(["--gateway-workers", "3", "--batch-size", "auto"]), cwd=Path("/"))
    assert config.gateway_workers == 3 and config.models[0].batch_size is None  # `auto`: sized for the device
    config = load_config(env_for([], {"EMBENTO_GATEWAY_WORKERS": "2"}), cwd=Path("/"))
    assert config.gateway_workers == 2 and load_config({}, cwd=Path("/")).gateway_workers is None


def test_a_model_that_cannot_be_found_is_one_message_before_serving(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("EMBENTO_CONFIG", raising=False)
    assert main(["serve", "--model-id", str(tmp_path / "missing")]) == 2
    error = capsys.readouterr().err
    assert f"looked for {tmp_path / 'missing'}" in error and "embento models import" in error
    assert "Traceback" not in error
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    assert main(["serve", "--model-id", "org/not-cached"]) == 2
    error = capsys.readouterr().err
    assert f"not in the local Hugging Face cache ({tmp_path / 'hub'})" in error
    assert "`hf download org/not-cached`" in error


@pytest.mark.parametrize(
    "flags, line",
    [
        (["--port", "abc"], "--port is 'abc'; it takes a port number from 1 to 65535"),
        (["--port", "70000"], "--port is '70000'; it takes a port number from 1 to 65535"),
        (["--backend", "foo"], "--backend is 'foo'; it takes auto, torch, onnx or ctranslate2"),
        (["--dtype", "float8"], "--dtype is 'float8'; it takes auto, float32, float16, bfloat16, int8 or int8_float16"),
        (["--normalize", "maybe"], "--normalize is 'maybe'; it takes true or false"),
        (["--batch-size", "0"], "--batch-size is '0'; it takes 1 or more"),
        (["--gateway-workers", "many"], "--gateway-workers is 'many'; it takes a whole number"),
    ],
)
def test_a_bad_flag_is_one_line_of_embentos_own_naming_the_flag_the_value_and_what_it_takes(tmp_path, flags, line):
    """Through the command as a user runs it: nothing of BentoML's usage (`-p`, BENTOML_PORT) or of pydantic's
    report (its URL, `input_value=`), and no server started (it exits before)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBENTO_")}
    result = subprocess.run(
        [sys.executable, "-m", "commands", "serve", *flags],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == f"embento: invalid configuration: {line}\n"
    assert result.stdout == ""


def test_a_bad_variable_is_named_with_its_setting_and_a_per_model_value_with_its_model(capsys, monkeypatch):
    monkeypatch.delenv("EMBENTO_CONFIG", raising=False)
    monkeypatch.setenv("EMBENTO_ENGINE", "foo")
    assert main(["serve", "--model-id", "a/x", "--model-id", "b/y"]) == 2  # one line, not one per model
    assert capsys.readouterr().err == (
        "embento: invalid configuration: EMBENTO_ENGINE (backend) is 'foo'; it takes auto, torch, onnx or ctranslate2\n"
    )
    assert main(["serve", "--model-id", "a/x", "--model-id", "b/y", "--normalize", "true", "--normalize", "no!"]) == 2
    assert capsys.readouterr().err == (
        "embento: invalid configuration: EMBENTO_ENGINE (backend) is 'foo'; it takes auto, torch, onnx or ctranslate2\n"
        "embento: invalid configuration: --normalize (model 2) is 'no!'; it takes true or false\n"
    )


def test_the_entry_points_own_help_lists_the_commands_the_bundle_has():
    """embento/cli.py prints embento/overview.py's list where the bundle cannot run: the same commands."""
    import argparse

    from embento.overview import COMMANDS

    (subcommands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(subcommands.choices) == list(COMMANDS)
    assert [action.help for action in subcommands._choices_actions] == list(COMMANDS.values())
