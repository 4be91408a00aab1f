"""The cache as the engine uses it: `answer` looks every input up (memory, then Redis for what memory lacks), has
only the misses computed, joins both in input order, and stores what was computed (memory at once, Redis in the
background: a store may trail the answer by up to a second). Only a request that succeeded is stored."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from config import errors
from config.keys_file import DEFAULT_TENANT
from config.settings import CacheSettings
from gateway.cache.keys import CacheKeys
from gateway.cache.memory import MemoryTier
from gateway.cache.policy import REQUEST_POLICY
from gateway.cache.redis_tier import RedisTier
from gateway.cache.values import Entry, decode, encode
from gateway.metrics import CACHE_BYTES, CACHE_ERRORS, CACHE_HITS, CACHE_LOOKUP_SECONDS, CACHE_MISSES
from gateway.redis_client import RETRY_AFTER_S
from gateway.tenants.keys import TENANT


@dataclass(frozen=True)
class Computed:
    """The outputs of some inputs, in their order, and each one's tokens."""

    outputs: list[np.ndarray]
    tokens: list[int]


@dataclass(frozen=True)
class Answered:
    """Every input's output in input order, all their tokens, and the share of those the cache answered (None
    when the cache was not asked: the model does not use it, or the request said `no-cache`/`no-store`)."""

    outputs: list[np.ndarray]
    tokens: int
    cached_tokens: int | None = None


# Computes the inputs at these positions (of the request's own), in that order.
Compute = Callable[[list[int]], Awaitable[Computed]]


class EmbeddingCache:
    """The tiers `settings` configures, for the models `enable`d (those with `cache: true`, once warm). A Redis
    that failed rests `redis_retry_after_s` by `clock`."""

    def __init__(
        self,
        settings: CacheSettings,
        *,
        redis_retry_after_s: float = RETRY_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.memory = MemoryTier(settings.memory_bytes) if settings.memory_bytes else None
        url = settings.redis()
        self.redis = (
            RedisTier(url, settings.ttl_s, settings.redis_timeout_ms / 1000, redis_retry_after_s, clock)
            if url
            else None
        )
        self._keys: dict[str, CacheKeys] = {}
        self._storing: set[asyncio.Task] = set()
        # Else each tenant has its own entries: a hit (its `cached_tokens`, its speed) would tell one tenant what
        # another embedded.
        self.shared_across_tenants = settings.share_across_tenants

    def enable(self, model: str, identity: bytes) -> None:
        """Cache `model`'s outputs under keys rooted in its `identity`; its series start at zero, so that a rate
        or an alert over them reads from the start."""
        tiers = [tier for tier, on in (("memory", self.memory), ("redis", self.redis)) if on is not None]
        if not tiers:
            return
        self._keys[model] = CacheKeys(identity)
        for tier in tiers:
            for series in (CACHE_HITS, CACHE_MISSES, CACHE_ERRORS):
                series.labels(model=model, tier=tier)
            CACHE_LOOKUP_SECONDS.labels(tier=tier)
        if self.memory is not None:
            CACHE_BYTES.labels(tier="memory").set(self.memory.held_bytes)

    def enabled(self, model: str) -> bool:
        return model in self._keys

    def keys(self, model: str, context: Mapping[str, Any], items: Iterable[bytes]) -> list[bytes] | None:
        """The inputs' keys; None when this request leaves the cache alone (a model without it, or a request
        that neither reads nor writes it)."""
        policy = REQUEST_POLICY.get()
        if model not in self._keys or not (policy.read or policy.write):
            return None
        tenant = TENANT.get().name
        if not self.shared_across_tenants and tenant != DEFAULT_TENANT:  # `default`'s keys are as before tenants
            context = {**context, "tenant": tenant}
        return self._keys[model].keys(context, items)

    async def answer(self, model: str, keys: list[bytes] | None, count: int, compute: Compute) -> Answered:
        """The `count` inputs' outputs, from the cache where it has them and from `compute` for the rest."""
        if keys is None:
            computed = await compute(list(range(count)))
            return Answered(computed.outputs, sum(computed.tokens))
        policy = REQUEST_POLICY.get()
        found = await self.lookup(model, keys) if policy.read else [None] * count
        first_of: dict[bytes, int] = {}  # an input repeated within the request is computed once
        for index, entry in enumerate(found):
            if entry is None:
                first_of.setdefault(keys[index], index)
        try:
            computed = await compute(list(first_of.values())) if first_of else Computed([], [])
        except errors.InvalidRequest:
            # Its message names an input by its position among those computed. The whole request, computed
            # again, fails at the same input while preparing it (before any model call), naming its own.
            if len(first_of) < count:
                await compute(list(range(count)))
            raise
        fresh = {key: Entry(output, tokens) for key, output, tokens in zip(first_of, computed.outputs, computed.tokens)}
        if policy.write and fresh:
            self.store(model, fresh)
        entries = [entry if entry is not None else fresh[key] for key, entry in zip(keys, found)]
        cached = sum(entry.tokens for entry in found if entry is not None)
        return Answered(
            [entry.output for entry in entries], sum(entry.tokens for entry in entries), cached if policy.read else None
        )

    async def lookup(self, model: str, keys: Sequence[bytes]) -> list[Entry | None]:
        """Each key's entry, memory first, then Redis for those memory lacks (which memory then keeps)."""
        found: list[Entry | None] = [None] * len(keys)
        if self.memory is not None:
            started = time.perf_counter()
            for index, key in enumerate(keys):
                value = self.memory.get(key)
                found[index] = decode(value) if value is not None else None
            self._count(model, "memory", found, started)
        missing = [index for index, entry in enumerate(found) if entry is None]
        if self.redis is None or not missing:
            return found
        started = time.perf_counter()
        values = await self.redis.get(model, [keys[index] for index in missing])
        if values is None:  # Redis failed (counted there) or is resting after a failure
            return found
        for index, value in zip(missing, values):
            if value is None:  # a miss: stays None
                continue
            entry = decode(value)
            if entry is None:  # a value of another format or a torn one: recomputed
                CACHE_ERRORS.labels(model=model, tier="redis").inc()
            elif self.memory is not None:
                self.memory.put(keys[index], value)
            found[index] = entry
        self._count(model, "redis", [found[index] for index in missing], started)
        if self.memory is not None:
            CACHE_BYTES.labels(tier="memory").set(self.memory.held_bytes)
        return found

    def store(self, model: str, entries: Mapping[bytes, Entry]) -> None:
        """Keep computed entries: in memory now, in Redis by a background write."""
        values = [(key, value) for key, entry in entries.items() if (value := encode(entry)) is not None]
        if self.memory is not None:
            for key, value in values:
                self.memory.put(key, value)
            CACHE_BYTES.labels(tier="memory").set(self.memory.held_bytes)
        if self.redis is not None and values:
            task = asyncio.create_task(self.redis.put(model, values))
            self._storing.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._storing.discard)

    async def stored(self) -> None:
        """Until the Redis writes under way are done (at most their timeout)."""
        if self._storing:
            await asyncio.wait(set(self._storing))

    @staticmethod
    def _count(model: str, tier: str, found: Sequence[Entry | None], started: float) -> None:
        CACHE_LOOKUP_SECONDS.labels(tier=tier).observe(time.perf_counter() - started)
        hits = sum(entry is not None for entry in found)
        if hits:
            CACHE_HITS.labels(model=model, tier=tier).inc(hits)
        if len(found) > hits:
            CACHE_MISSES.labels(model=model, tier=tier).inc(len(found) - hits)
