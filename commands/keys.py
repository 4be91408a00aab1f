"""`embento keys add NAME --file PATH`: a new API key for tenant NAME, printed once; only its SHA-256 is written.

A new tenant gets an entry with the limits given; an existing one gets the new key's hash beside its others
(rotation: both work until the old hash is removed). The file is written whole and swapped in, with mode 600, so a
server reading it never sees half of it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from config.errors import ConfigError
from config.keys_file import Tenant, new_secret, read_keys_file

LIMIT_FLAGS = (
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrent_requests",
    "max_stored_bytes",
    "max_queued_lines",
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    keys = commands.add_parser("keys", help="manage the tenants' API keys (auth.keys_file)")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    add = key_commands.add_parser("add", help="make a key for a tenant; prints the secret once")
    add.add_argument("name", help="the tenant (new, or an existing one to rotate its key)")
    add.add_argument("--file", required=True, type=Path, help="the keys file (created if missing)")
    add.add_argument("--models", help="served model names it may use, comma-separated (default: all)")
    for name in LIMIT_FLAGS:
        add.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int)
    add.add_argument("--weight", type=float, help="its share of a saturated model service (default 1)")


def add_key(args: argparse.Namespace) -> int:
    secret = new_secret()
    try:
        entries = _read(args.file)
        _add(entries, args, hashlib.sha256(secret.encode()).hexdigest())
        _write(args.file, entries)
    except (ConfigError, ValueError) as exc:
        print(f"embento keys: {exc}", file=sys.stderr)
        return 2
    print(secret)
    print(f"(the key of tenant '{args.name}', shown once: {args.file} keeps only its SHA-256)", file=sys.stderr)
    return 0


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or not isinstance(data.get("keys", []), list):
        raise ConfigError(f"{path} is not a keys file (a top-level `keys:` list)")
    return data.get("keys", [])


def _add(entries: list[dict[str, Any]], args: argparse.Namespace, digest: str) -> None:
    settings = {name: getattr(args, name) for name in (*LIMIT_FLAGS, "weight") if getattr(args, name) is not None}
    if args.models:
        settings["models"] = [model.strip() for model in args.models.split(",") if model.strip()]
    entry = next((entry for entry in entries if entry.get("name") == args.name), None)
    if entry is None:
        entry = {"name": args.name, "key_sha256": []}
        entries.append(entry)
    hashes = entry.get("key_sha256") or []
    entry["key_sha256"] = [*([hashes] if isinstance(hashes, str) else hashes), digest]
    entry.update(settings)
    Tenant.model_validate(entry)  # ValueError (pydantic's) names what is wrong


def _write(path: Path, entries: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as file:
            yaml.safe_dump({"keys": entries}, file, sort_keys=False)
        os.chmod(draft, 0o600)
        read_keys_file(Path(draft))  # the whole file as the server reads it: a key it would refuse is not printed
        os.replace(draft, path)
    except BaseException:
        Path(draft).unlink(missing_ok=True)
        raise
