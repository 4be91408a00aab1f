"""The Redis tier: values every gateway worker and replica shares, one `MGET` per request to read and one
write per request to store (a script that sets every key with its TTL), each under its own timeout.

Redis is an accelerator, never a dependency: when it is down, slow or answers what no value can be, the lookup
is a miss, the request is computed as if there were no cache, and Redis is left alone for a second. Then one
request tries it again (the client reconnects by itself) while the others keep computing; its success opens
the tier to all. A warning is logged at most once a minute; every failure is counted
(`embento_cache_errors_total`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.maint_notifications import MaintNotificationsConfig

from gateway.metrics import CACHE_ERRORS

T = TypeVar("T")
logger = logging.getLogger(__name__)
KEY_PREFIX = b"embento:"
RETRY_AFTER_S = 1.0  # after a failure, Redis is skipped this long: a dead one costs nothing per request
WARN_EVERY_S = 60.0
STORE_TIMEOUT_S = 1.0  # stores trail the answer; they may take this long
SET_ALL = "for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[i], 'EX', ARGV[#ARGV]) end"


class RedisTier:
    """The shared tier at `url`: lookups wait at most `timeout_s`, values live `ttl_s`; after a failure Redis rests
    `retry_after_s` by `clock`."""

    def __init__(
        self,
        url: str,
        ttl_s: int,
        timeout_s: float,
        retry_after_s: float = RETRY_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lookups = redis_client(url, timeout_s)
        self.stores = redis_client(url, STORE_TIMEOUT_S)
        # One script call sets every key with its TTL: a third of the client CPU of a pipeline of SETs, which is
        # what a request that misses pays for the cache (bench/cache.py, 0 % repeats).
        self._set_all = self.stores.register_script(SET_ALL)
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self._clock = clock
        self._skip_until = 0.0
        self._probing = False  # after a rest, one request tries Redis before the others do
        self._healthy = True
        self._warned_at = -WARN_EVERY_S
        self._abandoned: set[asyncio.Task] = set()

    def _may_try(self) -> bool:
        if self._healthy:
            return True
        if self._probing or self._clock() < self._skip_until:
            return False
        self._probing = True
        return True

    async def get(self, model: str, keys: Sequence[bytes]) -> list[bytes | None] | None:
        """Each key's value (None where absent); None when Redis could not answer in time."""
        if not self._may_try():
            return None
        try:
            values = await self._within(self.lookups.mget([KEY_PREFIX + key for key in keys]), self.timeout_s)
            if not isinstance(values, list) or len(values) != len(keys):
                raise ValueError(f"MGET answered {type(values).__name__}")
        except Exception as exc:  # down, slow, or a protocol error: all the same to a cache
            self._failed(model, "lookup", exc)
            return None
        self._succeeded()
        return [value if isinstance(value, bytes) else None for value in values]

    async def put(self, model: str, items: Sequence[tuple[bytes, bytes]]) -> bool:
        """Store every (key, value) with the TTL, in one round trip; False if Redis did not take them."""
        if not self._healthy:  # a store never probes: the next lookup does
            return False
        keys = [KEY_PREFIX + key for key, _ in items]
        try:
            await self._within(
                self._set_all(keys=keys, args=[*(value for _, value in items), self.ttl_s]), STORE_TIMEOUT_S
            )
        except Exception as exc:
            self._failed(model, "store", exc)
            return False
        return True

    async def _within(self, call: Awaitable[T], timeout_s: float) -> T:
        return await within(call, timeout_s, self._abandoned)

    def _succeeded(self) -> None:
        self._healthy, self._probing = True, False

    def _failed(self, model: str, what: str, exc: BaseException) -> None:
        CACHE_ERRORS.labels(model=model, tier="redis").inc()
        now = self._clock()
        self._healthy, self._probing, self._skip_until = False, False, now + self.retry_after_s
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "the Redis cache tier failed a %s (%r); computing without it, retrying in %.0f s "
                "(this warning repeats at most once a minute)",
                what,
                exc,
                self.retry_after_s,
            )

    async def close(self) -> None:
        await asyncio.gather(self.lookups.aclose(), self.stores.aclose())


async def within(call: Awaitable[T], timeout_s: float, abandoned: set[asyncio.Task]) -> T:
    """`call`'s result, or TimeoutError once `timeout_s` has passed. A late call is cancelled but not waited
    for (kept in `abandoned` until it ends): redis-py may finish a cancelled connect's handshake first (bounded by
    the socket timeout)."""
    task = asyncio.ensure_future(call)
    await asyncio.wait({task}, timeout=timeout_s)
    if not task.done():
        task.cancel()
        abandoned.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(_forget(abandoned))
        raise TimeoutError(f"no answer within {timeout_s * 1000:.0f} ms")
    return task.result()


def redis_client(url: str, timeout_s: float) -> redis.Redis:
    """A client whose every socket wait (connect, handshake, reply) is bounded by `timeout_s`. One immediate retry,
    on a fresh connection: a pooled one breaks once when Redis restarts. A new connection says nothing but what
    it must (no client name and version, no maintenance notifications, RESP2): 0.4 ms to open here instead of
    4.4, which a burst of requests opening connections at once would otherwise spend against the timeout."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 1),
        health_check_interval=0,
        protocol=2,
        driver_info=None,
        maint_notifications_config=MaintNotificationsConfig(enabled=False),
    )


def _forget(tasks: set[asyncio.Task]):
    def discard(task: asyncio.Task) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a late failure of an abandoned call is not "never retrieved"

    return discard
