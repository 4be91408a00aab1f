"""`embento keys add NAME --file PATH`: a new API key for tenant NAME, printed once; only its SHA-256 is written.

A new tenant gets an entry with the limits given; an existing one gets the new key's hash beside its others
(rotation: both work until the old hash is removed). The file is written whole and swapped in, with mode 600, so a
server reading it never sees half of it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from config.errors import ConfigError
from config.keys_file import Tenant, new_secret, read_keys_file
from embento.overview import COMMANDS

# Each limit flag and what it sets, as docs/tenants.md's table has them (unset: unlimited).
LIMIT_FLAGS = {
    "requests_per_minute": "requests it may send per minute",
    "tokens_per_minute": "tokens it may use per minute, as the answers' `usage` counts them",
    "max_concurrent_requests": "most of its requests answered at once",
    "max_stored_bytes": "most bytes of bulk-job files it may keep",
    "max_queued_lines": "most lines of its unfinished batches",
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    keys = commands.add_parser("keys", help=COMMANDS["keys"])
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    add = key_commands.add_parser("add", help="make a key for a tenant; prints the secret once")
    add.add_argument("name", help="the tenant (new, or an existing one to rotate its key)")
    add.add_argument("--file", required=True, type=Path, help="the keys file (created if missing)")
    add.add_argument(
        "--models",
        help="served model names it may use, separated by ';' as every list (',' works too; default: all)",
    )
    for name, what in LIMIT_FLAGS.items():
        add.add_argument(
            f"--{name.replace('_', '-')}", dest=name, type=int, metavar="N", help=f"{what} (default: unlimited)"
        )
    add.add_argument("--weight", type=float, help="its share of a saturated model service (default 1)")
    add.add_argument(
        "--may-set-keep-alive",
        action=argparse.BooleanOptionalAction,
        help="whether its requests may send keep_alive, which sets how long a model stays loaded for every tenant "
        "(default: no; refused with a 403)",
    )
    add.add_argument(
        "--interactive",
        action=argparse.BooleanOptionalAction,
        help="whether all its requests are served as live queries, ahead of indexing work, whatever their size "
        "(default: no; only its small requests are)",
    )


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
    settings = {
        name: getattr(args, name)
        for name in (*LIMIT_FLAGS, "weight", "may_set_keep_alive", "interactive")
        if getattr(args, name) is not None
    }
    if args.models:
        settings["models"] = model_names(args.models)
    entry = next((entry for entry in entries if entry.get("name") == args.name), None)
    if entry is None:
        entry = {"name": args.name, "key_sha256": []}
        entries.append(entry)
    hashes = entry.get("key_sha256") or []
    entry["key_sha256"] = [*([hashes] if isinstance(hashes, str) else hashes), digest]
    entry.update(settings)
    Tenant.model_validate(entry)  # ValueError (pydantic's) names what is wrong


def model_names(text: str) -> list[str]:
    """`m1;m2`, as every list of the command and the settings; `m1,m2` too, as the flag took before. (A name holding
    either character is listed in the file by hand.)"""
    return [name.strip() for name in re.split(r"[;,]", text) if name.strip()]


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
