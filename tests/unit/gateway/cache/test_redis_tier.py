"""The cache's Redis tier against a real `redis-server` (testkit/redis_server.py): shared between caches (as
between gateway workers), a value it cannot read recomputed and overwritten, and Redis killed, restarted or
stalled without a request failing or waiting for it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY

from config.settings import CacheSettings
from gateway.cache import redis_tier
from gateway.cache.tiers import Computed, EmbeddingCache
from testkit.redis_server import RedisServer, running_redis
from tests.conftest import free_port

MODEL = "redis-test-model"
IDENTITY = b"r" * 32
ITEMS = [b"Tfirst", b"Tsecond", b"Tthird"]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path, free_port()) as server:
        yield server


class Clock:
    """The Redis tier's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _cache(server: RedisServer, memory_bytes: int = 0, **options) -> EmbeddingCache:
    cache = EmbeddingCache(CacheSettings(memory_bytes=memory_bytes, redis_url=server.url, ttl_s=60), **options)
    cache.enable(MODEL, IDENTITY)
    return cache


class Model:
    """Counts the inputs it computes; input i's output is i's bytes as floats."""

    def __init__(self) -> None:
        self.computed: list[int] = []

    async def __call__(self, at: list[int]) -> Computed:
        self.computed += at
        return Computed([np.full(4, i, dtype=np.float32) for i in at], [10 + i for i in at])


def _errors() -> float:
    return REGISTRY.get_sample_value("embento_cache_errors_total", {"model": MODEL, "tier": "redis"}) or 0.0


async def _answer(cache: EmbeddingCache, model: Model, items: list[bytes] = ITEMS):
    keys = cache.keys(MODEL, {"operation": "test"}, items)
    answered = await cache.answer(MODEL, keys, len(items), model)
    await cache.stored()
    return answered


def test_two_caches_share_what_either_computed(redis_server):
    async def scenario() -> None:
        model = Model()
        first, second = _cache(redis_server), _cache(redis_server, memory_bytes=1 << 20)
        computed = await _answer(first, model)
        assert model.computed == [0, 1, 2] and computed.cached_tokens == 0
        shared = await _answer(second, model)
        assert model.computed == [0, 1, 2] and shared.cached_tokens == computed.tokens == 33
        assert [o.tobytes() for o in shared.outputs] == [o.tobytes() for o in computed.outputs]
        await asyncio.gather(first.redis.close(), second.redis.close())

    asyncio.run(scenario())


def test_a_value_redis_holds_in_another_format_is_recomputed_and_overwritten(redis_server):
    async def scenario() -> None:
        model, cache = Model(), _cache(redis_server)
        key = cache.keys(MODEL, {"operation": "test"}, ITEMS[:1])[0]
        await cache.redis.stores.set(redis_tier.KEY_PREFIX + key, b"not a value")
        errors = _errors()
        await _answer(cache, model, ITEMS[:1])
        assert model.computed == [0] and _errors() == errors + 1
        again = await _answer(cache, model, ITEMS[:1])
        assert model.computed == [0] and again.cached_tokens == 10
        await cache.redis.close()

    asyncio.run(scenario())


def test_redis_killed_then_restarted(redis_server):
    clock = Clock()

    async def scenario() -> None:
        model, cache = Model(), _cache(redis_server, redis_retry_after_s=0.2, clock=clock)
        await _answer(cache, model)
        redis_server.kill()
        errors = _errors()
        down = await _answer(cache, model)  # computed as if there were no cache; no error reaches the caller
        assert model.computed == [0, 1, 2] * 2 and down.cached_tokens == 0 and _errors() > errors
        redis_server.start()  # empty: a restarted Redis without persistence
        clock.now += 0.3  # past the rest
        await _answer(cache, model)
        back = await _answer(cache, model)  # the client reconnected by itself
        assert model.computed == [0, 1, 2] * 3 and back.cached_tokens == 33
        await cache.redis.close()

    asyncio.run(scenario())


def test_a_stalled_redis_is_not_waited_for(redis_server):
    async def scenario() -> None:
        model, cache = Model(), _cache(redis_server, redis_retry_after_s=0.0)  # every lookup tries the stalled Redis
        await _answer(cache, model)
        stall = redis_server.debug_sleep(10)
        try:
            # Redis answers nothing for 10 s. Each lookup gives up at its 20 ms timeout, also one that has to
            # open a connection (redis-py finishes a cancelled connect's handshake: it is not waited for).
            fresh = _cache(redis_server, redis_retry_after_s=0.0)
            lookups = [cache.lookup(MODEL, cache.keys(MODEL, {"operation": "test"}, ITEMS)) for _ in range(16)]
            lookups += [fresh.lookup(MODEL, fresh.keys(MODEL, {"operation": "test"}, ITEMS)) for _ in range(16)]
            found = await asyncio.wait_for(asyncio.gather(*lookups), 3)
            assert all(entry is None for entries in found for entry in entries)
            stalled = await asyncio.wait_for(
                cache.answer(MODEL, cache.keys(MODEL, {"operation": "test"}, ITEMS), len(ITEMS), model), 3
            )
            assert stalled.cached_tokens == 0 and model.computed == [0, 1, 2] * 2
        finally:
            stall.kill()

    asyncio.run(scenario())


def test_after_a_failure_one_lookup_tries_redis_again_while_the_others_compute(redis_server):
    clock = Clock()

    async def scenario() -> None:
        cache = _cache(redis_server, redis_retry_after_s=0.2, clock=clock)
        redis_server.kill()
        errors = _errors()
        assert await cache.redis.get(MODEL, [b"k"]) is None and _errors() == errors + 1
        assert await cache.redis.get(MODEL, [b"k"]) is None and _errors() == errors + 1  # resting: not tried
        clock.now += 0.19
        assert await cache.redis.get(MODEL, [b"k"]) is None and _errors() == errors + 1  # still resting
        clock.now += 0.02
        answers = await asyncio.gather(*(cache.redis.get(MODEL, [b"k"]) for _ in range(10)))
        assert answers == [None] * 10 and _errors() == errors + 2  # one probe, not ten
        assert await cache.redis.get(MODEL, [b"k"]) is None and _errors() == errors + 2  # the probe failed: resting
        redis_server.start()
        clock.now += 0.21
        assert await cache.redis.get(MODEL, [b"k"]) == [None]  # the probe succeeds: open to all
        assert await asyncio.gather(*(cache.redis.get(MODEL, [b"k"]) for _ in range(5))) == [[None]] * 5

    asyncio.run(scenario())
