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

from gateway.metrics import CACHE_ERRORS
from gateway.redis_client import RETRY_AFTER_S, Breaker, redis_client, within

T = TypeVar("T")
logger = logging.getLogger(__name__)
KEY_PREFIX = b"embento:"
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
        # what a request that misses pays for the cache (0 % repeats; bench/cache.py, a one-off since removed:
        # `git show 6a7ba5e:bench/cache.py`).
        self._set_all = self.stores.register_script(SET_ALL)
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.breaker = Breaker(retry_after_s, clock)  # after a rest, one request tries Redis before the others do
        self._abandoned: set[asyncio.Task] = set()

    async def get(self, model: str, keys: Sequence[bytes]) -> list[bytes | None] | None:
        """Each key's value (None where absent); None when Redis could not answer in time."""
        if not self.breaker.may_try():
            return None
        try:
            values = await self._within(self.lookups.mget([KEY_PREFIX + key for key in keys]), self.timeout_s)
            if not isinstance(values, list) or len(values) != len(keys):
                raise ValueError(f"MGET answered {type(values).__name__}")
        except Exception as exc:  # down, slow, or a protocol error: all the same to a cache
            self._failed(model, "lookup", exc)
            return None
        self.breaker.succeeded()
        return [value if isinstance(value, bytes) else None for value in values]

    async def put(self, model: str, items: Sequence[tuple[bytes, bytes]]) -> bool:
        """Store every (key, value) with the TTL, in one round trip; False if Redis did not take them."""
        if not self.breaker.healthy:  # a store never probes: the next lookup does
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

    def _failed(self, model: str, what: str, exc: BaseException) -> None:
        CACHE_ERRORS.labels(model=model, tier="redis").inc()
        self.breaker.failed(f"the Redis cache tier failed a {what} ({exc!r}); computing without it")

    async def close(self) -> None:
        await asyncio.gather(self.lookups.aclose(), self.stores.aclose())
