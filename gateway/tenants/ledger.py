"""Where a tenant's rates and concurrency are counted: for one server in shared memory (every gateway worker's
requests, exactly), or for every replica in Redis (`limits.redis_url`).

Rates are token buckets, one per limit, as OpenAI's replenish: a bucket holds a minute's worth (the limit) and
refills continuously at the limit per minute. A request takes one request from its bucket when it is admitted. Its
tokens are known only once it is answered, so it is admitted while the token bucket is above zero and its tokens
(as its `usage` counts them) are taken when it is answered: a large request may take the bucket below zero, and the
next ones wait until it refills. Concurrency is the tenant's requests being answered.

A request's `Standing` says what the rate-limit headers report, and why it was refused, if it was.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from config.keys_file import Tenant
from gateway.shared_memory import SharedCounters
from server_state.shared_table import SharedTable

Refusal = Literal["requests", "tokens", "concurrency"]
CONCURRENCY_RETRY_S = 1.0  # a request waiting for a slot has no schedule to read; retry in a second
MAX_TENANTS = 1024  # rows of the shared-memory table
IDLE_ROW_S = 600  # a row not used this long may be given to another tenant (its buckets are full again)


@dataclass(frozen=True)
class Reading:
    """One bucket as the headers report it."""

    limit: int
    remaining: int
    reset_s: float  # until the bucket is full again


@dataclass(frozen=True)
class Standing:
    requests: Reading | None = None
    tokens: Reading | None = None
    refused: Refusal | None = None
    retry_after_s: float = 0.0


UNCOUNTED = Standing()


class Ledger(Protocol):
    async def enter(self, tenant: Tenant, request_id: str) -> Standing:
        """Admit a request (taking one from its request bucket and a concurrency slot), or say why not."""
        ...

    async def leave(self, tenant: Tenant, request_id: str, tokens: int) -> Standing:
        """The admitted request is answered: its slot back, its `tokens` taken."""
        ...


def refilled(level: float, seconds: float, per_minute: int) -> float:
    return min(float(per_minute), level + seconds * per_minute / 60)


def reading(level: float, per_minute: int | None) -> Reading | None:
    if per_minute is None:
        return None
    return Reading(per_minute, max(0, math.floor(level)), (per_minute - level) * 60 / per_minute)


def refusal(tenant: Tenant, requests: float, tokens: float, in_flight: int) -> tuple[Refusal | None, float]:
    """Why a request is refused with these levels and this many in flight, and when to retry; (None, 0) if not."""
    rpm, tpm = tenant.requests_per_minute, tenant.tokens_per_minute
    if rpm is not None and requests < 1:
        return "requests", (1 - requests) * 60 / rpm
    if tpm is not None and tokens <= 0:
        return "tokens", (1 - tokens) * 60 / tpm
    if tenant.max_concurrent_requests is not None and in_flight >= tenant.max_concurrent_requests:
        return "concurrency", CONCURRENCY_RETRY_S
    return None, 0.0


def standing(
    tenant: Tenant, requests: float, tokens: float, refused: Refusal | None = None, retry_after_s: float = 0.0
) -> Standing:
    return Standing(
        reading(requests, tenant.requests_per_minute), reading(tokens, tenant.tokens_per_minute), refused, retry_after_s
    )


class SharedMemoryLedger:
    """The server's counts, in a table every gateway worker maps: per tenant a row of its two buckets (levels in
    thousandths, last update in µs), and its requests in flight per worker (`SharedCounters`, so a worker that
    dies holding some frees them when restarted)."""

    COLUMNS = 6  # tenant id, request level, its time, token level, its time, last use

    def __init__(self, clock: Callable[[], float] = time.time, max_tenants: int = MAX_TENANTS) -> None:
        """`max_tenants`: the table's rows, tenants active at once (every worker's ledger must have as many)."""
        self._table = SharedTable("tenant-buckets", max_tenants, self.COLUMNS)
        self._in_flight = SharedCounters([str(row) for row in range(max_tenants)], "tenant-requests")
        self._clock = clock
        self._max_tenants = max_tenants

    async def enter(self, tenant: Tenant, request_id: str) -> Standing:
        now_us = int(self._clock() * 1e6)
        with self._table.locked() as table, self._in_flight.locked():
            row = self._row(table, tenant.name, now_us)
            requests = self._level(table, row, 1, tenant.requests_per_minute, now_us)
            tokens = self._level(table, row, 3, tenant.tokens_per_minute, now_us)
            refused, retry_after = refusal(tenant, requests, tokens, self._in_flight.total(str(row)))
            if refused is None:
                requests -= 1 if tenant.requests_per_minute is not None else 0
                self._in_flight.add(str(row), 1)
            self._store(table, row, tenant, requests, tokens, now_us)
        return standing(tenant, requests, tokens, refused, retry_after)

    async def leave(self, tenant: Tenant, request_id: str, tokens: int) -> Standing:
        now_us = int(self._clock() * 1e6)
        with self._table.locked() as table, self._in_flight.locked():
            row = self._row(table, tenant.name, now_us)
            requests = self._level(table, row, 1, tenant.requests_per_minute, now_us)
            left = self._level(table, row, 3, tenant.tokens_per_minute, now_us) - tokens
            self._in_flight.add(str(row), -1)
            self._store(table, row, tenant, requests, left, now_us)
        return standing(tenant, requests, left)

    def _row(self, table, name: str, now_us: int) -> int:
        """The tenant's row: found by its id from its name's hash, else a free one (or one idle past reuse)."""
        tenant_id = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little", signed=True) or 1
        start = tenant_id % self._max_tenants
        reusable = None
        for step in range(self._max_tenants):
            row = (start + step) % self._max_tenants
            if table[row, 0] == tenant_id:
                return row
            idle = now_us - table[row, 5] > IDLE_ROW_S * 1e6 and not self._in_flight.total(str(row))
            if reusable is None and (table[row, 0] == 0 or idle):
                reusable = row
            if table[row, 0] == 0:
                break
        if reusable is None:
            raise RuntimeError(f"more than {self._max_tenants} tenants were active within {IDLE_ROW_S} s")
        table[reusable] = (tenant_id, 0, 0, 0, 0, now_us)  # a bucket without a time is full
        return reusable

    @staticmethod
    def _level(table, row: int, column: int, per_minute: int | None, now_us: int) -> float:
        if per_minute is None:
            return 0.0
        if table[row, column + 1] == 0:
            return float(per_minute)
        level = table[row, column] / 1000
        return refilled(level, (now_us - table[row, column + 1]) / 1e6, per_minute)

    @staticmethod
    def _store(table, row: int, tenant: Tenant, requests: float, tokens: float, now_us: int) -> None:
        """A limit the tenant does not have keeps no time: its bucket starts full if the limit is set later."""
        table[row, 1:] = (
            round(requests * 1000),
            now_us if tenant.requests_per_minute is not None else 0,
            round(tokens * 1000),
            now_us if tenant.tokens_per_minute is not None else 0,
            now_us,
        )
