"""The Redis tier: values every gateway worker and replica shares, one `MGET` per request to read and one
pipelined write per request to store, each under its own timeout.

Redis is an accelerator, never a dependency: when it is down, slow or answers what no value can be, the lookup
is a miss, the request is computed as if there were no cache, and Redis is left alone for a second before it
is tried again (the client reconnects by itself). A warning is logged at most once a minute; every failure is
counted (`embento_cache_errors_total`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import redis.asyncio as redis
from redis.backoff import NoBackoff
from redis.asyncio.retry import Retry

from gateway.metrics import CACHE_ERRORS

logger = logging.getLogger(__name__)
KEY_PREFIX = b"embento:"
RETRY_AFTER_S = 1.0  # after a failure, Redis is skipped this long: a dead one costs nothing per request
WARN_EVERY_S = 60.0
STORE_TIMEOUT_S = 1.0  # stores trail the answer; they may take this long


class RedisTier:
    """The shared tier at `url`: lookups wait at most `timeout_s`, values live `ttl_s`."""

    def __init__(self, url: str, ttl_s: int, timeout_s: float) -> None:
        # One immediate retry, on a fresh connection: a pooled one breaks once when Redis restarts. The timeout
        # bounds both tries together.
        self.client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 1),
                                           health_check_interval=0)
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self._skip_until = 0.0
        self._warned_at = -WARN_EVERY_S

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._skip_until

    async def get(self, model: str, keys: Sequence[bytes]) -> list[bytes | None] | None:
        """Each key's value (None where absent); None when Redis could not answer in time."""
        if not self.available:
            return None
        try:
            values = await asyncio.wait_for(self.client.mget([KEY_PREFIX + key for key in keys]), self.timeout_s)
        except Exception as exc:  # down, slow, or a protocol error: all the same to a cache
            self._failed(model, "lookup", exc)
            return None
        if not isinstance(values, list) or len(values) != len(keys):
            self._failed(model, "lookup", ValueError(f"MGET answered {type(values).__name__}"))
            return None
        return [value if isinstance(value, bytes) else None for value in values]

    async def put(self, model: str, items: Sequence[tuple[bytes, bytes]]) -> bool:
        """Store every (key, value) with the TTL, in one round trip; False if Redis did not take them."""
        if not self.available:
            return False
        pipeline = self.client.pipeline(transaction=False)
        for key, value in items:
            pipeline.set(KEY_PREFIX + key, value, ex=self.ttl_s)
        try:
            await asyncio.wait_for(pipeline.execute(), STORE_TIMEOUT_S)
        except Exception as exc:
            self._failed(model, "store", exc)
            return False
        return True

    def _failed(self, model: str, what: str, exc: BaseException) -> None:
        CACHE_ERRORS.labels(model=model, tier="redis").inc()
        now = time.monotonic()
        self._skip_until = now + RETRY_AFTER_S
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning("the Redis cache tier failed a %s (%r); computing without it, retrying in %.0f s "
                           "(this warning repeats at most once a minute)", what, exc, RETRY_AFTER_S)

    async def close(self) -> None:
        await self.client.aclose()
