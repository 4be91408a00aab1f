"""The Redis ledger (gateway/tenants/redis_ledger.py) against a real `redis-server` (testkit/redis_server.py): two
ledgers (two replicas) on one Redis share a tenant's limits exactly, a dead replica's requests lapse, and Redis
down or stalled lets requests through uncounted (fail open) or refuses them (fail closed), Redis left alone for a
second after a failure."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from config import errors
from config.keys_file import Tenant
from gateway import redis_client as redis_client_module
from gateway.tenants.ledger import CONCURRENCY_RETRY_S, UNCOUNTED
from gateway.tenants.redis_ledger import RedisLedger
from testkit.redis_server import RedisServer, running_redis
from tests.conftest import free_port

TIMEOUT_S = 2.0  # generous: the tests that need Redis to answer must not see a loaded host's pause as a failure


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path, free_port()) as server:
        yield server


def make_ledger(
    server: RedisServer, fail_open: bool = True, lease_s: float = 600.0, timeout_s: float = TIMEOUT_S, **options
) -> RedisLedger:
    return RedisLedger(server.url, timeout_s, lease_s=lease_s, fail_open=fail_open, **options)


def store_errors() -> float:
    return REGISTRY.get_sample_value("embento_limit_store_errors_total") or 0.0


def in_flight_key(tenant: Tenant) -> str:
    return f"embento:tenant:{{{tenant.name}}}:in_flight"


def buckets_key(tenant: Tenant) -> str:
    return f"embento:tenant:{{{tenant.name}}}:buckets"


async def close(*ledgers: RedisLedger) -> None:
    await asyncio.gather(*(ledger.client.aclose() for ledger in ledgers))


def test_two_ledgers_on_one_redis_count_down_one_request_bucket(redis_server):
    async def scenario() -> None:
        first, second = make_ledger(redis_server), make_ledger(redis_server)
        tenant = Tenant(name="acme", requests_per_minute=5)  # refills one in 12 s: not within this test
        remaining = []
        for n in range(5):
            standing = await (first if n % 2 else second).enter(tenant, f"r{n}")
            assert standing.refused is None and standing.tokens is None
            remaining.append(standing.requests.remaining)
            await (second if n % 2 else first).leave(tenant, f"r{n}", 0)
        assert remaining == [4, 3, 2, 1, 0]
        for ledger in (first, second):
            refused = await ledger.enter(tenant, "late")
            assert refused.refused == "requests" and 0 < refused.retry_after_s <= 12  # until one has refilled
            assert refused.requests.limit == 5 and refused.requests.remaining == 0
        await close(first, second)

    asyncio.run(scenario())


def test_two_ledgers_admit_exactly_the_limit_among_concurrent_requests(redis_server):
    async def scenario() -> None:
        ledgers = [make_ledger(redis_server), make_ledger(redis_server)]
        rated = Tenant(name="rated", requests_per_minute=5)
        standings = await asyncio.gather(*(ledgers[n % 2].enter(rated, f"r{n}") for n in range(20)))
        assert sum(s.refused is None for s in standings) == 5
        assert {s.refused for s in standings} == {None, "requests"}
        held = Tenant(name="held", max_concurrent_requests=3)
        standings = await asyncio.gather(*(ledgers[n % 2].enter(held, f"h{n}") for n in range(20)))
        admitted = [f"h{n}" for n, s in enumerate(standings) if s.refused is None]
        assert len(admitted) == 3
        assert all(s.retry_after_s == CONCURRENCY_RETRY_S for s in standings if s.refused == "concurrency")
        await ledgers[1].leave(held, admitted[0], 0)  # a slot back, whichever replica admitted it
        assert (await ledgers[0].enter(held, "again")).refused is None
        assert (await ledgers[1].enter(held, "more")).refused == "concurrency"
        await close(*ledgers)

    asyncio.run(scenario())


def test_tokens_are_taken_when_answered_and_shared(redis_server):
    async def scenario() -> None:
        first, second = make_ledger(redis_server), make_ledger(redis_server)
        tenant = Tenant(name="acme", tokens_per_minute=600)  # ten a second
        entered = await first.enter(tenant, "r1")
        assert entered.refused is None and entered.tokens.limit == 600 and entered.tokens.remaining == 600
        left = await first.leave(tenant, "r1", 1600)
        assert left.tokens.remaining == 0 and 100 < left.tokens.reset_s <= 160  # about -1000: 160 s to full
        refused = await second.enter(tenant, "r2")
        assert refused.refused == "tokens"
        assert refused.retry_after_s == pytest.approx(100.1, abs=5)  # (1 + ~1000) tokens at 10 a second
        await close(first, second)

    asyncio.run(scenario())


def test_the_requests_of_a_dead_replica_lapse(redis_server):
    """A replica that admitted a request and died never leaves it: its slot is held until its lease passes."""

    async def scenario() -> None:
        dead, alive = make_ledger(redis_server, lease_s=600), make_ledger(redis_server)
        tenant = Tenant(name="acme", max_concurrent_requests=1)
        assert (await dead.enter(tenant, "orphan")).refused is None
        lapses = await alive.client.zscore(in_flight_key(tenant), "orphan")
        seconds, micros = await alive.client.time()
        assert lapses == pytest.approx(seconds + micros / 1e6 + 600, abs=60)  # Redis's clock, plus the lease
        assert 0 < await alive.client.ttl(in_flight_key(tenant)) <= 600
        assert (await alive.enter(tenant, "waiting")).refused == "concurrency"
        await alive.client.zadd(in_flight_key(tenant), {"orphan": seconds - 1})  # ten minutes later
        assert (await alive.enter(tenant, "next")).refused is None
        assert await alive.client.zrange(in_flight_key(tenant), 0, -1) == [b"next"]
        await close(dead, alive)

    asyncio.run(scenario())


def test_a_short_lease_lapses_on_redis_clock(redis_server):
    async def scenario() -> None:
        dead, alive = make_ledger(redis_server, lease_s=0.2), make_ledger(redis_server)
        tenant = Tenant(name="acme", max_concurrent_requests=1)
        assert (await dead.enter(tenant, "orphan")).refused is None
        deadline = time.monotonic() + 30
        while (await alive.enter(tenant, "next")).refused is not None:
            assert time.monotonic() < deadline, "the dead replica's request never lapsed"
            await asyncio.sleep(0.05)
        await close(dead, alive)

    asyncio.run(scenario())


def test_with_redis_down_fail_open_lets_requests_through_uncounted(redis_server):
    async def scenario() -> None:
        ledger = make_ledger(redis_server, fail_open=True)
        tenant = Tenant(name="acme", requests_per_minute=1, max_concurrent_requests=1)
        assert (await ledger.enter(tenant, "counted")).refused is None
        redis_server.kill()
        before = store_errors()
        for n in range(3):  # over its limits, had they been counted
            assert await ledger.enter(tenant, f"r{n}") is UNCOUNTED
            assert await ledger.leave(tenant, f"r{n}", 100) is UNCOUNTED
        assert store_errors() == before + 6
        await close(ledger)

    asyncio.run(scenario())


def test_with_redis_down_fail_closed_refuses_with_not_ready(redis_server):
    async def scenario() -> None:
        ledger = make_ledger(redis_server, fail_open=False)
        tenant = Tenant(name="acme", requests_per_minute=10)
        assert (await ledger.enter(tenant, "counted")).refused is None
        redis_server.kill()
        before = store_errors()
        with pytest.raises(errors.NotReady, match="unavailable"):
            await ledger.enter(tenant, "refused")
        assert await ledger.leave(tenant, "counted", 5) is UNCOUNTED  # answered already: nothing to refuse
        assert store_errors() == before + 2
        await close(ledger)

    asyncio.run(scenario())


def test_after_a_failure_redis_is_left_alone_for_a_second(redis_server, caplog):
    clock = SimpleNamespace(now=100.0)

    async def scenario() -> None:
        ledger = make_ledger(redis_server, fail_open=True, clock=lambda: clock.now)
        tenant = Tenant(name="acme", requests_per_minute=10)
        redis_server.kill()
        with caplog.at_level(logging.WARNING, logger=redis_client_module.__name__):
            assert await ledger.enter(tenant, "r1") is UNCOUNTED
            redis_server.start()  # back, but not tried for a second
            clock.now += redis_client_module.RETRY_AFTER_S / 2
            before = store_errors()
            assert await ledger.enter(tenant, "r2") is UNCOUNTED
            assert store_errors() == before + 1
            assert redis_server.command("EXISTS", buckets_key(tenant)) == ":0"  # Redis was not asked
            clock.now += redis_client_module.RETRY_AFTER_S / 2  # a second after the failure
            counted = await ledger.enter(tenant, "r3")
            assert counted.refused is None and counted.requests.remaining == 9
            assert redis_server.command("EXISTS", buckets_key(tenant)) == ":1"
        warnings = [r.getMessage() for r in caplog.records if r.name == redis_client_module.__name__]
        assert len(warnings) == 1 and "let through" in warnings[0]  # once a minute at most
        await close(ledger)

    asyncio.run(scenario())


def test_a_stalled_redis_is_not_waited_for(redis_server):
    async def scenario() -> None:
        ledgers = [
            make_ledger(redis_server, fail_open=True, timeout_s=0.05),
            make_ledger(redis_server, fail_open=False, timeout_s=0.05),
        ]
        tenant = Tenant(name="acme", requests_per_minute=10)
        stall = redis_server.debug_sleep(10)
        try:
            assert await asyncio.wait_for(ledgers[0].enter(tenant, "open"), 3) is UNCOUNTED
            with pytest.raises(errors.NotReady):
                await asyncio.wait_for(ledgers[1].enter(tenant, "closed"), 3)
        finally:
            stall.kill()
            stall.wait()

    asyncio.run(scenario())
