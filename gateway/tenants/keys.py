"""Who is calling: the tenants of the keys file (`auth.keys_file`, config/keys_file.py), and the key a request
sends matched to one. A request's key is hashed, and its digest compared with every known digest in constant time:
how long that takes tells nothing of which key nor how much of it matched, nor of the sent key's length.

`api_key` (`EMBENTO_API_KEY`, `api_key_file`) keeps working: each of its keys is the tenant `default`, without
limits. With no key configured anywhere, no key is asked for and every request is `default`'s; one that sends the
admin key (`admin_key`) is also the only caller there who may set a model's `keep_alive` (`ADMIN`).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TypeVar

from config.errors import ConfigError
from config.keys_file import DEFAULT_TENANT, Tenant, digest, read_keys_file
from server_state.server_files import RELOAD_MARK, server_file

logger = logging.getLogger(__name__)
CHECK_EVERY_S = 1.0  # how often the keys file is looked at for a change
OPEN = Tenant(name=DEFAULT_TENANT)  # every request's when no key is configured, and `api_key`'s
# The admin key's requests where no API key is configured: anyone may call there, so a residency change needs it.
# Otherwise `default`'s, as every caller's there (its bulk jobs, metrics and access-log lines); the log's `admin`.
ADMIN = Tenant(name=DEFAULT_TENANT, may_set_keep_alive=True)
# The tenant of the request (or bulk-job line) being answered.
TENANT: ContextVar[Tenant] = ContextVar("embento_tenant", default=OPEN)


V = TypeVar("V")


def caller_id(tenant: Tenant) -> str:
    """Who asked, as the log names them: the admin, or a tenant by its name (never by its key)."""
    return "admin" if tenant is ADMIN else f"tenant '{tenant.name}'"


def allowed(by_model: Mapping[str, V]) -> dict[str, V]:
    """The entries of the models the current tenant may use: the others are not named to it, not even as
    unknown."""
    tenant = TENANT.get()
    return {name: value for name, value in by_model.items() if tenant.may_use(name)}


class Keyring:
    """The tenants, and the key digests that name them."""

    def __init__(self, tenants: Iterable[Tenant], open_: bool = False) -> None:
        self.open = open_  # no key configured: nobody is asked for one
        self.tenants = {tenant.name: tenant for tenant in tenants}
        self._digests = [(bytes.fromhex(d), tenant) for tenant in self.tenants.values() for d in tenant.key_sha256]

    def tenant(self, token: str) -> Tenant | None:
        """The tenant whose key `token` is, comparing every digest whatever matched."""
        sent = digest(token)
        found = None
        for known, tenant in self._digests:
            if hmac.compare_digest(sent, known):
                found = tenant
        return found


def config_tenant(api_keys: Sequence[str]) -> Tenant:
    """`api_key`'s keys, as the tenant `default` without limits."""
    return OPEN.model_copy(update={"key_sha256": tuple(digest(key).hex() for key in api_keys)})


class Keys:
    """The keyring in force: the keys file's tenants and `api_key`'s, read again when the file changes or the
    server got a SIGHUP (looked at once a second, on use). A file that turns invalid keeps the last good keyring,
    with an error logged; one invalid at start is a ConfigError. It is looked at every `check_every_s` at most, on
    `clock`."""

    def __init__(
        self,
        api_keys: Sequence[str],
        keys_file: str | None,
        check_every_s: float = CHECK_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        admin_key: str | None = None,
    ) -> None:
        self._api_keys = tuple(api_keys)
        self._admin_key = admin_key
        self._check_every_s = check_every_s
        self._clock = clock
        self._path = Path(keys_file).expanduser() if keys_file else None
        self._seen: tuple = ()
        self._checked = float("-inf")
        self._keyring = self._read()

    def current(self) -> Keyring:
        now = self._clock()
        if self._path is not None and now - self._checked >= self._check_every_s:
            self._checked = now
            if self._signature() != self._seen:
                self.reload()
        return self._keyring

    def is_admin(self, token: str | None) -> bool:
        """Whether `token` is the admin key, compared in constant time."""
        if self._admin_key is None or not token:
            return False
        return hmac.compare_digest(digest(token), digest(self._admin_key))  # hashed: its length untold too

    def named(self, name: str) -> Tenant:
        """The tenant of that name; one with no limits and every model if its key has been removed since (its
        bulk jobs still finish)."""
        return self.current().tenants.get(name) or Tenant(name=name)

    def reload(self) -> None:
        try:
            self._keyring = self._read()
        except ConfigError as exc:
            logger.error("keys file not reloaded, the last one read stays in force: %s", exc)
            return
        logger.warning("keys file read: %d tenants", len(self._keyring.tenants))

    def _read(self) -> Keyring:
        self._seen = self._signature()
        tenants = read_keys_file(self._path) if self._path is not None else []
        if self._api_keys:
            if any(tenant.name == DEFAULT_TENANT for tenant in tenants):
                raise ConfigError(f"the keys file names a tenant '{DEFAULT_TENANT}', which is api_key's")
            tenants.append(config_tenant(self._api_keys))
        return Keyring(tenants, open_=self._path is None and not self._api_keys)

    def _signature(self) -> tuple:
        """What changes when the file is replaced or written (a mounted secret is a swapped symlink), or the
        server got a SIGHUP."""
        signature: list = []
        for path in (self._path, server_file(RELOAD_MARK)):
            try:
                found = os.stat(path) if path is not None else None
            except OSError:
                found = None
            signature.append(found and (found.st_ino, found.st_mtime_ns, found.st_size))
        return tuple(signature)
