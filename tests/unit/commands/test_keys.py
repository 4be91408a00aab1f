"""`embento keys add` (commands/keys.py): the secret printed once, only its SHA-256 in the file (mode 600), a second
key for an existing tenant beside its first, and nothing written when the entry would not be valid."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from commands import main
from commands.flags import PROJECT_ROOT
from config.keys_file import KEY_PREFIX, read_keys_file
from gateway.tenants.keys import Keys


def add(capsys: pytest.CaptureFixture, path: Path, name: str, *flags: str) -> tuple[int, str, str]:
    """(exit status, standard output, standard error) of `embento keys add name --file path flags`."""
    status = main(["keys", "add", name, "--file", str(path), *flags])
    out, err = capsys.readouterr()
    return status, out, err


def entries(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text())["keys"]


def test_a_new_key_is_printed_once_and_only_its_hash_written(tmp_path, capsys):
    path = tmp_path / "etc" / "keys.yaml"  # its folder made too
    status, out, err = add(
        capsys,
        path,
        "acme",
        "--requests-per-minute",
        "600",
        "--tokens-per-minute",
        "200000",
        "--max-concurrent-requests",
        "8",
        "--models",
        "m1, m2,",
        "--weight",
        "2.5",
        "--max-stored-bytes",
        "1000",
        "--max-queued-lines",
        "50",
    )
    assert status == 0
    secret = out.strip()
    assert out == secret + "\n" and secret.startswith(KEY_PREFIX) and len(secret) >= len(KEY_PREFIX) + 43
    assert secret not in err and "shown once" in err and "acme" in err
    text = path.read_text()
    assert secret not in text and secret[len(KEY_PREFIX) :] not in text
    assert entries(path) == [
        {
            "name": "acme",
            "key_sha256": [hashlib.sha256(secret.encode()).hexdigest()],
            "requests_per_minute": 600,
            "tokens_per_minute": 200000,
            "max_concurrent_requests": 8,
            "max_stored_bytes": 1000,
            "max_queued_lines": 50,
            "weight": 2.5,
            "models": ["m1", "m2"],
        }
    ]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["keys.yaml"]  # no draft left behind
    tenant = Keys((), str(path)).current().tenant(secret)  # the server takes the file as written
    assert tenant.name == "acme" and tenant.requests_per_minute == 600 and tenant.models == ("m1", "m2")


def test_each_key_is_new(tmp_path, capsys):
    secrets = {add(capsys, tmp_path / "keys.yaml", f"t{n}")[1].strip() for n in range(5)}
    assert len(secrets) == 5
    keyring = Keys((), str(tmp_path / "keys.yaml")).current()
    assert sorted(keyring.tenant(secret).name for secret in secrets) == [f"t{n}" for n in range(5)]


def test_a_second_key_for_a_tenant_rotates_beside_the_first(tmp_path, capsys):
    path = tmp_path / "keys.yaml"
    _, first, _ = add(capsys, path, "acme", "--requests-per-minute", "60", "--models", "m1")
    _, other, _ = add(capsys, path, "globex")
    status, second, _ = add(capsys, path, "acme", "--tokens-per-minute", "1000")
    assert status == 0 and first != second
    acme, globex = entries(path)
    assert acme["key_sha256"] == [hashlib.sha256(s.strip().encode()).hexdigest() for s in (first, second)]
    assert (acme["requests_per_minute"], acme["tokens_per_minute"], acme["models"]) == (60, 1000, ["m1"])
    assert globex["name"] == "globex" and len(globex["key_sha256"]) == 1
    keyring = Keys((), str(path)).current()
    for secret in (first, second):
        assert keyring.tenant(secret.strip()).name == "acme"  # both work until the old hash is removed
    assert keyring.tenant(other.strip()).name == "globex"


def test_given_limits_replace_a_tenants_own(tmp_path, capsys):
    path = tmp_path / "keys.yaml"
    add(capsys, path, "acme", "--requests-per-minute", "60", "--weight", "3")
    add(capsys, path, "acme", "--requests-per-minute", "120")
    (acme,) = entries(path)
    assert (acme["requests_per_minute"], acme["weight"], len(acme["key_sha256"])) == (120, 3, 2)


def test_the_keep_alive_permission_is_given_and_taken_back(tmp_path, capsys):
    path = tmp_path / "keys.yaml"
    add(capsys, path, "ops", "--may-set-keep-alive")
    assert read_keys_file(path)[0].may_set_keep_alive
    add(capsys, path, "ops", "--no-may-set-keep-alive")
    assert not read_keys_file(path)[0].may_set_keep_alive
    add(capsys, path, "plain")
    assert not read_keys_file(path)[1].may_set_keep_alive


def test_a_hand_written_file_with_one_hash_gets_a_list(tmp_path, capsys):
    path = tmp_path / "keys.yaml"
    path.write_text(
        f"# written by hand\nkeys:\n  - name: acme\n    key_sha256: {'ab' * 32}\n    max_concurrent_requests: 4\n"
    )
    os.chmod(path, 0o644)
    status, out, _ = add(capsys, path, "acme")
    assert status == 0
    assert entries(path) == [
        {
            "name": "acme",
            "key_sha256": ["ab" * 32, hashlib.sha256(out.strip().encode()).hexdigest()],
            "max_concurrent_requests": 4,
        }
    ]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # rewritten with mode 600
    assert [tenant.name for tenant in read_keys_file(path)] == ["acme"]


@pytest.mark.parametrize(
    "name, flags, problem",
    [
        ("bad name", (), "name"),
        ("acme", ("--weight", "0"), "weight"),
        ("acme", ("--requests-per-minute", "0"), "requests_per_minute"),
        ("a" * 65, (), "name"),
    ],
)
def test_an_invalid_entry_writes_nothing_and_prints_no_key(tmp_path, capsys, name, flags, problem):
    path = tmp_path / "keys.yaml"
    add(capsys, path, "existing")
    before = path.read_bytes()
    status, out, err = add(capsys, path, name, *flags)
    assert status == 2 and out == "" and err.startswith("embento keys: ") and problem in err
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keys.yaml"]
    assert not (tmp_path / "new.yaml").exists()
    assert add(capsys, tmp_path / "new.yaml", name, *flags)[0] == 2 and not (tmp_path / "new.yaml").exists()


@pytest.mark.parametrize("text", ["- just\n- a list\n", "keys: {name: acme}\n"])
def test_a_file_that_is_not_a_keys_file_is_left_alone(tmp_path, capsys, text):
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    status, out, err = add(capsys, path, "acme")
    assert status == 2 and out == "" and "not a keys file" in err
    assert path.read_text() == text


def test_python_dash_m_commands_keys_add(tmp_path):
    path = tmp_path / "keys.yaml"
    env = {**os.environ, "BENTOML_DO_NOT_TRACK": "True", "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "keys",
            "add",
            "acme",
            "--file",
            str(path),
            "--max-concurrent-requests",
            "2",
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    secret = done.stdout.strip()
    assert done.stdout.count(secret) == 1 and secret not in done.stderr
    assert Keys((), str(path)).current().tenant(secret).max_concurrent_requests == 2


def test_a_file_the_server_would_refuse_gets_no_new_key(tmp_path, capsys):
    """Another tenant's entry is invalid (a secret pasted where its hash belongs): the server would refuse the
    whole file, so the new key would never work; nothing is written and no key is printed."""
    path = tmp_path / "keys.yaml"
    original = yaml.safe_dump({"keys": [{"name": "other", "key_sha256": "not-a-hash"}]})
    path.write_text(original)
    status, out, err = add(capsys, path, "acme")
    assert status == 2 and out == "" and "key_sha256" in err
    assert path.read_text() == original and [p.name for p in tmp_path.iterdir()] == ["keys.yaml"]


def test_every_option_of_keys_add_says_what_it_does():
    import argparse

    from commands import build_parser

    def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return action.choices[name]

    add_parser = subcommand(subcommand(build_parser(), "keys"), "add")
    undocumented = [action.dest for action in add_parser._actions if not action.help]
    assert undocumented == []


@pytest.mark.parametrize("given", ["m1;m2", "m1; m2;", "m1,m2"])  # `;` as every list; `,` as before
def test_models_is_a_semicolon_list_and_commas_still_work(tmp_path, capsys, given):
    path = tmp_path / "keys.yaml"
    assert add(capsys, path, "acme", "--models", given)[0] == 0
    assert entries(path)[0]["models"] == ["m1", "m2"]
