"""The keys file (config/keys_file.py) and the keyring (gateway/tenants/keys.py): digests only, every digest
compared whatever was sent, a world-writable or invalid file refused, the file read again when it changes (at most
once a second, on use), the last good keyring kept when it turns invalid."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from config.errors import ConfigError
from config.keys_file import DEFAULT_TENANT, Tenant, read_keys_file
from gateway.tenants import keys as keys_module
from gateway.tenants.keys import OPEN, TENANT, Keyring, Keys, allowed, config_tenant


def sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def write_keys(path: Path, entries: list[dict], mode: int = 0o600, mtime_ns: int | None = None) -> Path:
    """The keys file, replaced whole (a new inode, as `mv` and `embento keys add` do), with `mode`."""
    draft = path.with_name(f".{path.name}.draft")
    draft.write_text(yaml.safe_dump({"keys": entries}))
    os.chmod(draft, mode)
    if mtime_ns is not None:
        os.utime(draft, ns=(mtime_ns, mtime_ns))
    os.replace(draft, path)
    return path


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# The file holds digests, never secrets


def test_a_tenant_holds_hex_digests_only():
    tenant = Tenant(name="acme", key_sha256=sha("secret").upper())
    assert tenant.key_sha256 == (sha("secret"),)  # one string is a list of one, lower-cased
    for not_a_digest in ("secret", sha("secret")[:-1], sha("secret")[:-1] + "g", sha("secret") + "0"):
        with pytest.raises(ValidationError, match="64 hex digits"):
            Tenant(name="acme", key_sha256=[sha("other"), not_a_digest])


def test_a_key_opens_its_tenant_and_its_digest_opens_nothing(tmp_path):
    path = write_keys(
        tmp_path / "keys.yaml",
        [{"name": "acme", "key_sha256": [sha("old"), sha("new")]}, {"name": "globex", "key_sha256": sha("globex-key")}],
    )
    keyring = Keys((), str(path)).current()
    assert not keyring.open
    assert keyring.tenant("old").name == keyring.tenant("new").name == "acme"  # rotation: both work
    assert keyring.tenant("globex-key").name == "globex"
    for wrong in (sha("old"), "", "ol", "old ", "OLD", "new\n"):
        assert keyring.tenant(wrong) is None, wrong


@pytest.mark.parametrize(
    "token", ["", "x", "first-key", "first-key" * 1000, "\u00e9" * 7, sha("first-key"), "none-of-them"]
)
def test_a_key_of_any_length_is_compared_with_every_digest(monkeypatch, token):
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    keyring = Keyring(
        [
            Tenant(name="a", key_sha256=[sha("first-key"), sha("second-key")]),
            Tenant(name="b", key_sha256=sha("third-key")),
            config_tenant(("fourth-key",)),
        ]
    )
    found = keyring.tenant(token)
    assert (found.name if found else None) == ("a" if token == "first-key" else None)
    assert len(calls) == 4  # every digest, also after a match
    assert all(isinstance(a, bytes) and len(a) == len(b) == 32 for a, b in calls)  # digests, never the key
    assert {a for a, _ in calls} == {hashlib.sha256(token.encode()).digest()}


def test_a_match_on_the_last_digest_is_found_after_comparing_them_all(monkeypatch):
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append(b) or real(a, b))
    keyring = Keyring([Tenant(name=f"t{i}", key_sha256=sha(f"key-{i}")) for i in range(5)])
    assert keyring.tenant("key-0").name == "t0" and len(calls) == 5
    calls.clear()
    assert keyring.tenant("key-4").name == "t4" and len(calls) == 5


# Files refused


def test_a_world_writable_keys_file_is_refused(tmp_path):
    path = write_keys(tmp_path / "keys.yaml", [{"name": "acme", "key_sha256": sha("k")}], mode=0o666)
    with pytest.raises(ConfigError, match="world-writable"):
        read_keys_file(path)
    with pytest.raises(ConfigError, match="world-writable"):
        Keys((), str(path))
    os.chmod(path, 0o664)  # group-writable is the operator's call
    assert [tenant.name for tenant in read_keys_file(path)] == ["acme"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("keys: [{name: acme, key_sha256: not-a-digest}]", "not a valid keys file"),
        ("keys: [{name: acme, secret: abc}]", "not a valid keys file"),  # unknown fields are refused
        ("tenants: []", "not a valid keys file"),
        ("keys: [{name: 'bad name'}]", "not a valid keys file"),
        ("keys: [{name: acme, weight: 0}]", "not a valid keys file"),
        ("keys: [{name: acme, requests_per_minute: 0}]", "not a valid keys file"),
        ("keys: [{name: acme}, {name: globex}, {name: acme}]", r"each tenant's name once .*\['acme'\]"),
        ("keys: [unclosed", "not a valid keys file"),
    ],
)
def test_an_invalid_keys_file_is_refused_with_its_reason(tmp_path, text, problem):
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(ConfigError, match=problem):
        read_keys_file(path)
    with pytest.raises(ConfigError):  # at start: the server does not start
        Keys((), str(path))


def test_a_missing_keys_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        Keys((), str(tmp_path / "absent.yaml"))


def test_an_empty_keys_file_lets_nobody_in_but_api_keys(tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text("")
    path.chmod(0o600)
    assert read_keys_file(path) == []
    keyring = Keys((), str(path)).current()
    assert not keyring.open and keyring.tenant("") is None  # a key is still asked for
    keyring = Keys(("api",), str(path)).current()
    assert keyring.tenant("api").name == DEFAULT_TENANT


# api_key and the tenant default


def test_api_keys_are_the_unlimited_tenant_default_beside_the_file(tmp_path):
    path = write_keys(
        tmp_path / "keys.yaml", [{"name": "acme", "key_sha256": sha("acme-key"), "requests_per_minute": 5}]
    )
    keyring = Keys(("api-one", "api-two"), str(path)).current()
    for key in ("api-one", "api-two"):
        tenant = keyring.tenant(key)
        assert tenant.name == DEFAULT_TENANT and not tenant.limited and tenant.models is None
    assert keyring.tenant("acme-key").requests_per_minute == 5
    assert config_tenant(("api-one",)).key_sha256 == (sha("api-one"),)


def test_a_file_naming_default_beside_api_keys_is_refused(tmp_path):
    path = write_keys(tmp_path / "keys.yaml", [{"name": DEFAULT_TENANT, "key_sha256": sha("k")}])
    with pytest.raises(ConfigError, match="default"):
        Keys(("api",), str(path))
    assert Keys((), str(path)).current().tenant("k").name == DEFAULT_TENANT  # without api_key it is a name


def test_without_any_key_the_keyring_is_open():
    assert Keys((), None).current().open
    assert not Keys(("k",), None).current().open


# Reloading


def test_a_replaced_file_is_read_again(tmp_path):
    path = write_keys(tmp_path / "keys.yaml", [{"name": "acme", "key_sha256": sha("old")}])
    keys = Keys((), str(path), check_every_s=0.0)
    assert keys.current().tenant("old").name == "acme"
    write_keys(
        path,
        [
            {"name": "acme", "key_sha256": sha("new"), "requests_per_minute": 7},
            {"name": "globex", "key_sha256": sha("globex")},
        ],
    )
    keyring = keys.current()
    assert keyring.tenant("old") is None  # revoked
    assert keyring.tenant("new").requests_per_minute == 7 and keyring.tenant("globex").name == "globex"


def test_a_file_written_in_place_is_read_again(tmp_path):
    path = write_keys(tmp_path / "keys.yaml", [{"name": "acme", "key_sha256": sha("old")}], mtime_ns=10**18)
    keys = Keys((), str(path), check_every_s=0.0)
    inode = path.stat().st_ino
    path.write_text(yaml.safe_dump({"keys": [{"name": "acme", "key_sha256": sha("new")}]}))  # same length
    os.utime(path, ns=(10**18 + 10**9, 10**18 + 10**9))  # the modification time alone changes
    assert path.stat().st_ino == inode
    assert keys.current().tenant("new").name == "acme" and keys.current().tenant("old") is None


def test_the_file_is_looked_at_once_a_second_at_most(tmp_path):
    path = write_keys(tmp_path / "keys.yaml", [{"name": "acme", "key_sha256": sha("old")}])
    clock = Clock()
    keys = Keys((), str(path), clock=clock)
    assert keys.current().tenant("old") is not None  # looked at now (1000 s)
    write_keys(path, [{"name": "acme", "key_sha256": sha("new")}])
    clock.now += keys_module.CHECK_EVERY_S / 2
    assert keys.current().tenant("old") is not None and keys.current().tenant("new") is None
    clock.now += keys_module.CHECK_EVERY_S / 2
    assert keys.current().tenant("new") is not None and keys.current().tenant("old") is None


def test_an_unchanged_file_is_not_read_again(tmp_path, monkeypatch):
    path = write_keys(tmp_path / "keys.yaml", [{"name": "acme", "key_sha256": sha("k")}])
    keys = Keys((), str(path), check_every_s=0.0)
    reads = []
    real = keys_module.read_keys_file
    monkeypatch.setattr(keys_module, "read_keys_file", lambda p: reads.append(p) or real(p))
    for _ in range(5):
        assert keys.current().tenant("k").name == "acme"
    assert reads == []


def test_a_file_turning_invalid_keeps_the_last_good_keyring(tmp_path, caplog):
    path = write_keys(tmp_path / "keys.yaml", [{"name": "acme", "key_sha256": sha("k"), "requests_per_minute": 3}])
    keys = Keys((), str(path), check_every_s=0.0)
    before = keys.current()
    with caplog.at_level(logging.ERROR, logger=keys_module.__name__):
        path.write_text("keys: [{name: acme, key_sha256: typo}]\n")
        assert keys.current() is before and keys.current().tenant("k").requests_per_minute == 3
        write_keys(path, [{"name": "acme", "key_sha256": sha("other")}], mode=0o666)
        assert keys.current() is before
        path.unlink()
        assert keys.current() is before
    messages = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert len(messages) == 3  # once per change, not once per use
    assert all(m.startswith("keys file not reloaded, the last one read stays in force") for m in messages)
    assert "not a valid keys file" in messages[0] and "world-writable" in messages[1]
    assert "cannot be read" in messages[2]
    write_keys(path, [{"name": "acme", "key_sha256": sha("fixed")}])
    assert keys.current().tenant("fixed").name == "acme" and keys.current().tenant("k") is None


def test_a_sighup_mark_reads_an_unchanged_looking_file_again(tmp_path, monkeypatch):
    """A change the file's inode, time and size do not show is read once the server's reload mark is touched."""
    mark = tmp_path / "reload-mark"
    monkeypatch.setattr(keys_module, "server_file", lambda name: mark)
    path = write_keys(tmp_path / "keys.yaml", [{"name": "acme", "key_sha256": sha("old")}], mtime_ns=10**18)
    keys = Keys((), str(path), check_every_s=0.0)
    path.write_text(yaml.safe_dump({"keys": [{"name": "acme", "key_sha256": sha("new")}]}))
    os.utime(path, ns=(10**18, 10**18))  # looks unchanged
    assert keys.current().tenant("old") is not None
    mark.touch()  # SIGHUP
    assert keys.current().tenant("new") is not None and keys.current().tenant("old") is None


def test_named_finds_a_tenant_or_one_without_limits_once_removed(tmp_path):
    path = write_keys(
        tmp_path / "keys.yaml", [{"name": "acme", "key_sha256": sha("k"), "models": ["m1"], "max_queued_lines": 10}]
    )
    keys = Keys((), str(path), check_every_s=0.0)
    assert keys.named("acme").max_queued_lines == 10 and keys.named("acme").models == ("m1",)
    write_keys(path, [])
    gone = keys.named("acme")  # its bulk jobs still finish
    assert gone == Tenant(name="acme") and not gone.limited and gone.may_use("anything")


# Models per tenant


def test_allowed_keeps_the_current_tenants_models_only():
    by_model = {"m1": 1, "m2": 2, "m3": 3}
    assert TENANT.get() is OPEN and allowed(by_model) == by_model
    token = TENANT.set(Tenant(name="acme", models=["m3", "m1", "absent"]))
    try:
        assert allowed(by_model) == {"m1": 1, "m3": 3}
    finally:
        TENANT.reset(token)
    token = TENANT.set(Tenant(name="none", models=[]))
    try:
        assert allowed(by_model) == {}
    finally:
        TENANT.reset(token)


def test_limited_means_a_rate_or_concurrency_limit():
    assert not Tenant(name="a", weight=3, models=["m"], max_stored_bytes=1, max_queued_lines=1).limited
    for limit in ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests"):
        assert Tenant(name="a", **{limit: 1}).limited
