"""What a split topology's gateways share on Kubernetes, for the replica-loss test (tests/server/test_replica_loss.py):
a real Redis counting the tenants' limits, a real PostgreSQL holding the bulk jobs, and a keys file with two
tenants (the load's, unlimited, and one limited to `rate` requests a minute), and a sender spending the limited
key."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from config.keys_file import new_secret
from testkit.ports import free_port
from testkit.postgres_server import PostgresServer, running_postgres
from testkit.redis_server import running_redis

LEASE_S = 2.0  # a stopped gateway's claimed chunks are taken over this soon
CHUNK_LINES = 4
REDIS_TIMEOUT_MS = 2000


@dataclass
class SharedState:
    gateway_env: dict[str, str]  # the gateways' settings naming the shared servers and the keys file
    load_key: str
    limited_key: str
    postgres: PostgresServer


def keys_file(path: Path, keys: dict[str, dict]) -> dict[str, str]:
    """A keys file of the tenants `keys` (name: limits), and each one's secret."""
    secrets_by_name = {name: new_secret() for name in keys}
    entries = [
        {"name": name, "key_sha256": hashlib.sha256(secrets_by_name[name].encode()).hexdigest(), **limits}
        for name, limits in keys.items()
    ]
    path.write_text(yaml.safe_dump({"keys": entries}))
    os.chmod(path, 0o600)  # a keys file anyone may write is refused
    return secrets_by_name


@contextlib.contextmanager
def shared_state(folder: Path, rate: int) -> Iterator[SharedState]:
    """Redis and PostgreSQL running, and the gateways' settings for them; the limited tenant allowed `rate`
    requests a minute (and a burst of as many)."""
    (folder / "redis").mkdir(parents=True)
    keys = keys_file(folder / "keys.yaml", {"load": {}, "limited": {"requests_per_minute": rate}})
    with (
        running_redis(folder / "redis", free_port()) as redis,
        running_postgres(folder / "postgres", free_port()) as postgres,
    ):
        env = {
            "EMBENTO_AUTH_KEYS_FILE": str(folder / "keys.yaml"),
            "EMBENTO_LIMITS_REDIS_URL": redis.url,
            # Not the default 50 ms: with every core busy, a gateway's loop reads Redis's answer late, and a late
            # answer lets the request through uncounted (`on_store_error: open`), which is not what is measured.
            "EMBENTO_LIMITS_REDIS_TIMEOUT_MS": str(REDIS_TIMEOUT_MS),
            "EMBENTO_JOBS_DATABASE_URL": postgres.url,
            "EMBENTO_JOBS_LEASE_S": str(LEASE_S),
            "EMBENTO_JOBS_CHUNK_LINES": str(CHUNK_LINES),
        }
        yield SharedState(env, keys["load"], keys["limited"], postgres)


@dataclass
class LimitedSender:
    """One client spending the limited tenant's key back to back, no retries: what it was let through (200),
    refused (429), and any other answer."""

    url: str
    model: str
    key: str
    admitted: int = 0
    refused: int = 0
    others: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _answered: threading.Condition = field(default_factory=threading.Condition)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._send, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        assert self._thread is not None
        self._stop.set()
        self._thread.join(timeout=120)

    def wait_refused(self, count: int, timeout_s: float = 300) -> None:
        """Until `count` requests in all have been refused."""
        with self._answered:
            assert self._answered.wait_for(lambda: self.refused >= count, timeout_s), (self.admitted, self.refused)

    def allowed(self, rate: int) -> float:
        """What one bucket shared by every replica lets through over the run: the burst, and the refill."""
        return rate + self.elapsed_s * rate / 60

    def _send(self) -> None:
        started = time.monotonic()
        body = {"model": self.model, "input": "a limited tenant's sentence"}
        with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {self.key}"}) as http:
            while not self._stop.is_set():
                try:
                    response = http.post(f"{self.url}/v1/embeddings", json=body)
                except httpx.HTTPError as exc:
                    self.others.append(repr(exc)[:160])
                    continue
                with self._answered:
                    if response.status_code == 200:
                        self.admitted += 1
                    elif response.status_code == 429:
                        self.refused += 1
                    else:
                        self.others.append(f"{response.status_code} {response.text[:160]}")
                    self._answered.notify_all()
        self.elapsed_s = time.monotonic() - started
