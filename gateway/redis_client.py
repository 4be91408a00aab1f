"""What every Redis user in the gateway shares (the cache's shared tier, the API keys' limits): a client whose every
wait is bounded, a call abandoned at its timeout without being waited for, and a breaker that leaves a failed Redis
alone for a while, so that a dead one costs nothing per request, and warns at most once a minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.maint_notifications import MaintNotificationsConfig

T = TypeVar("T")
logger = logging.getLogger(__name__)
RETRY_AFTER_S = 1.0  # after a failure, Redis is skipped this long
WARN_EVERY_S = 60.0


class Breaker:
    """Whether to try Redis now. After a failure it rests `retry_after_s` by `clock`; then, with `one_probe`, one
    caller tries it while the others keep going without, and its success opens it to all."""

    def __init__(
        self, retry_after_s: float = RETRY_AFTER_S, clock: Callable[[], float] = time.monotonic, one_probe: bool = True
    ) -> None:
        self.retry_after_s = retry_after_s
        self._clock = clock
        self._one_probe = one_probe
        self._skip_until = 0.0
        self._probing = False
        self.healthy = True
        self._warned_at = -WARN_EVERY_S

    def may_try(self) -> bool:
        if self.healthy or not self._one_probe:
            return self.healthy or self._clock() >= self._skip_until
        if self._probing or self._clock() < self._skip_until:
            return False
        self._probing = True
        return True

    def succeeded(self) -> None:
        self.healthy, self._probing = True, False

    def failed(self, warning: str) -> None:
        """Rest from now; log `warning` (which says what failed and what happens meanwhile) unless one was logged
        within the last minute."""
        now = self._clock()
        self.healthy, self._probing = False, False
        if now >= self._skip_until:  # a failure while resting (a caller that did not try) does not extend the rest
            self._skip_until = now + self.retry_after_s
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "%s, retrying in %.0f s (this warning repeats at most once a minute)", warning, self.retry_after_s
            )


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
