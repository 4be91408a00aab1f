"""The keys file (`auth.keys_file`): the tenants, each with its keys' SHA-256 and its limits; and how a key is made.

A key is a random 32-byte token (`new_secret`); the file holds only its SHA-256, so an unsalted hash is enough
(nothing to guess from it) and a leaked file opens nothing. The gateway matches keys to tenants
(gateway/tenants/keys.py); `embento keys add` writes entries (commands/keys.py).
"""

from __future__ import annotations

import hashlib
import secrets
import stat
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from config.errors import ConfigError

DEFAULT_TENANT = "default"
KEY_PREFIX = "emb-"


class Tenant(BaseModel):
    """One entry of the keys file: a tenant, its keys' digests and its limits (None: unlimited)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description=("The tenant: in metrics, logs and bulk jobs' ownership."),
    )
    key_sha256: tuple[str, ...] = Field(default=(), description=("The hex SHA-256 of each secret (several: rotation)."))
    models: tuple[str, ...] | None = Field(None, description="Served model names it may use; unset: all.")
    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1, description="Tokens as the answers' `usage` counts them.")
    max_concurrent_requests: int | None = Field(None, ge=1)
    weight: float = Field(
        1.0, gt=0, le=1000, description=("Its share of a saturated model service against other tenants' (default 1).")
    )
    max_stored_bytes: int | None = Field(None, ge=1, description="Bytes of files (bulk jobs) it may keep.")
    max_queued_lines: int | None = Field(
        None, ge=1, description=("Lines of its unfinished batches; a batch that would pass it is refused.")
    )
    may_set_keep_alive: bool = Field(
        False,
        description=(
            "Whether its requests' `keep_alive` is honoured: it sets how long a model stays loaded for every "
            "tenant, so it is refused (403) unless allowed here."
        ),
    )
    interactive: bool = Field(
        False,
        description=(
            "Whether all its requests are live queries, whatever their size: they leave ahead of indexing work "
            "(gateway/queue/priority.py). Unset, only its small requests are."
        ),
    )

    @field_validator("key_sha256", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("key_sha256")
    @classmethod
    def _hex_digests(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for digest in value:
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
                raise ValueError("key_sha256 must be 64 hex digits (the SHA-256 of the key, not the key)")
        return tuple(digest.lower() for digest in value)

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models

    @property
    def limited(self) -> bool:
        return any(
            value is not None
            for value in (self.requests_per_minute, self.tokens_per_minute, self.max_concurrent_requests)
        )


class KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[Tenant] = Field(default_factory=list)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def read_keys_file(path: Path) -> list[Tenant]:
    """The file's tenants; ConfigError when it is missing, anyone may write it, or it is not a valid keys file."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"auth.keys_file {path} cannot be read: {exc.strerror}") from None
    if mode & stat.S_IWOTH:
        raise ConfigError(f"auth.keys_file {path} is world-writable: anyone could add a key; chmod o-w it")
    try:
        tenants = KeysFile.model_validate(yaml.safe_load(text) or {}).keys
    except (yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"auth.keys_file {path} is not a valid keys file: {exc}") from None
    names = [tenant.name for tenant in tenants]
    if repeated := sorted({name for name in names if names.count(name) > 1}):
        raise ConfigError(
            f"auth.keys_file {path}: each tenant's name once (several keys: a list); repeated: {repeated}"
        )
    return tenants
