"""The shared-memory ledger (gateway/tenants/ledger.py) under a clock the test moves: token buckets that count
down and refill, tokens taken when a request is answered (below zero, then a wait), concurrency slots taken and
given back; and, on a file-backed table as a server's gateway workers map it, two workers sharing one count."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from config.keys_file import Tenant
from gateway import shared_memory as shared
from gateway.tenants import ledger as ledger_module
from gateway.tenants.ledger import CONCURRENCY_RETRY_S, Reading, SharedMemoryLedger, Standing, reading, refusal
from server_state import shared_table


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def run(coroutine):
    return asyncio.run(coroutine)


def enter(ledger: SharedMemoryLedger, tenant: Tenant, request_id: str = "r") -> Standing:
    return run(ledger.enter(tenant, request_id))


def leave(ledger: SharedMemoryLedger, tenant: Tenant, tokens: int = 0, request_id: str = "r") -> Standing:
    return run(ledger.leave(tenant, request_id, tokens))


def test_the_request_bucket_counts_down_then_refuses_until_it_refills():
    clock = Clock()
    ledger = SharedMemoryLedger(clock)
    tenant = Tenant(name="acme", requests_per_minute=3)
    admitted = [enter(ledger, tenant) for _ in range(3)]
    assert [s.refused for s in admitted] == [None] * 3 and all(s.tokens is None for s in admitted)
    assert [s.requests for s in admitted] == [Reading(3, 2, 20.0), Reading(3, 1, 40.0), Reading(3, 0, 60.0)]
    refused = enter(ledger, tenant)
    assert refused.refused == "requests" and refused.retry_after_s == pytest.approx(20.0)
    assert refused.requests == Reading(3, 0, 60.0)  # a refused request takes nothing
    clock.now += 10
    again = enter(ledger, tenant)
    assert again.refused == "requests" and again.retry_after_s == pytest.approx(10.0)
    assert again.requests == Reading(3, 0, 50.0)
    clock.now += 10  # one request's worth refilled: 3 per minute
    assert enter(ledger, tenant).refused is None
    assert enter(ledger, tenant).refused == "requests"


def test_a_bucket_refills_continuously_up_to_a_minutes_worth():
    clock = Clock()
    ledger = SharedMemoryLedger(clock)
    tenant = Tenant(name="acme", requests_per_minute=60)
    for _ in range(60):
        assert enter(ledger, tenant).refused is None
    assert enter(ledger, tenant).refused == "requests"
    clock.now += 10  # one a second
    assert [enter(ledger, tenant).refused for _ in range(11)] == [None] * 10 + ["requests"]
    clock.now += 3600  # an idle hour fills it, no further
    first = enter(ledger, tenant)
    assert first.requests == Reading(60, 59, 1.0)
    assert sum(enter(ledger, tenant).refused is None for _ in range(70)) == 59


def test_tokens_are_taken_when_answered_and_may_go_below_zero():
    clock = Clock()
    ledger = SharedMemoryLedger(clock)
    tenant = Tenant(name="acme", tokens_per_minute=120)  # two a second
    entered = enter(ledger, tenant)
    assert entered.refused is None and entered.tokens == Reading(120, 120, 0.0) and entered.requests is None
    left = leave(ledger, tenant, tokens=300)  # a large request: admitted with 120 left, answered with 300
    assert left.tokens == Reading(120, 0, 150.0)  # -180 reads as 0 left, full again in (120 + 180) / 2 s
    refused = enter(ledger, tenant)
    assert refused.refused == "tokens" and refused.retry_after_s == pytest.approx(90.5)  # back above zero
    clock.now += 90  # refilled to exactly zero: still refused
    refused = enter(ledger, tenant)
    assert refused.refused == "tokens" and refused.retry_after_s == pytest.approx(0.5)
    clock.now += 0.5
    admitted = enter(ledger, tenant)  # one token: admitted, whatever its size
    assert admitted.refused is None and admitted.tokens.remaining == 1
    assert leave(ledger, tenant, tokens=40).tokens.remaining == 0
    assert enter(ledger, tenant).refused == "tokens"


def test_a_request_answered_with_no_tokens_takes_none():
    ledger = SharedMemoryLedger(Clock())
    tenant = Tenant(name="acme", tokens_per_minute=10)
    for _ in range(50):
        assert enter(ledger, tenant).refused is None
        assert leave(ledger, tenant, tokens=0).tokens == Reading(10, 10, 0.0)


def test_requests_are_refused_before_tokens_and_tokens_before_concurrency():
    clock = Clock()
    ledger = SharedMemoryLedger(clock)
    tenant = Tenant(name="acme", requests_per_minute=1, tokens_per_minute=60, max_concurrent_requests=1)
    assert enter(ledger, tenant, "first").refused is None  # in flight, holding the only slot
    refused = enter(ledger, tenant, "second")
    assert refused.refused == "requests" and refused.retry_after_s == pytest.approx(60.0)
    clock.now += 60
    assert enter(ledger, tenant, "third").refused == "concurrency"
    leave(ledger, tenant, tokens=120, request_id="first")
    clock.now += 60  # the request bucket is full; the tokens are at -60 + 60 = 0
    refused = enter(ledger, tenant, "fourth")
    assert refused.refused == "tokens" and refused.retry_after_s == pytest.approx(1.0)


def test_concurrent_requests_are_limited_and_their_slots_given_back():
    ledger = SharedMemoryLedger(Clock())
    tenant = Tenant(name="acme", requests_per_minute=100, max_concurrent_requests=2)
    assert [enter(ledger, tenant, f"r{i}").refused for i in range(2)] == [None, None]
    refused = enter(ledger, tenant, "r2")
    assert refused.refused == "concurrency" and refused.retry_after_s == CONCURRENCY_RETRY_S
    assert refused.requests.remaining == 98  # the refused request took none
    leave(ledger, tenant, request_id="r0")
    assert enter(ledger, tenant, "r3").refused is None
    assert enter(ledger, tenant, "r4").refused == "concurrency"
    leave(ledger, tenant, request_id="r1")
    leave(ledger, tenant, request_id="r3")
    assert [enter(ledger, tenant, f"r{i}").refused for i in (5, 6, 7)] == [None, None, "concurrency"]


def test_tenants_are_counted_apart():
    ledger = SharedMemoryLedger(Clock())
    first, second = Tenant(name="first", requests_per_minute=1), Tenant(name="second", requests_per_minute=1)
    assert enter(ledger, first).refused is None and enter(ledger, first).refused == "requests"
    assert enter(ledger, second).refused is None


def test_an_unlimited_tenant_reads_no_buckets():
    ledger = SharedMemoryLedger(Clock())
    tenant = Tenant(name="acme", max_concurrent_requests=1)
    standing = enter(ledger, tenant)
    assert standing == Standing()  # admitted, nothing to report in the headers
    assert leave(ledger, tenant, tokens=1000) == Standing()


def test_a_limit_set_later_starts_with_a_full_bucket():
    clock = Clock()
    ledger = SharedMemoryLedger(clock)
    for _ in range(5):
        enter(ledger, Tenant(name="acme"))
        leave(ledger, Tenant(name="acme"), tokens=1000)
    reloaded = Tenant(name="acme", requests_per_minute=10, tokens_per_minute=500)  # the keys file changed
    standing = enter(ledger, reloaded)
    assert standing.requests == Reading(10, 9, 6.0) and standing.tokens == Reading(500, 500, 0.0)


def test_rows_of_idle_tenants_are_reused_once_the_table_is_full():
    clock = Clock()
    ledger = SharedMemoryLedger(clock, max_tenants=3)
    tenants = [Tenant(name=f"t{i}", requests_per_minute=2) for i in range(4)]
    for tenant in tenants[:3]:
        assert enter(ledger, tenant).requests.remaining == 1
        leave(ledger, tenant)
    with pytest.raises(RuntimeError, match="more than 3 tenants"):
        enter(ledger, tenants[3])
    clock.now += ledger_module.IDLE_ROW_S + 1
    assert enter(ledger, tenants[0]).requests.remaining == 1  # t0 is back: its row is in use again
    assert enter(ledger, tenants[3]).requests.remaining == 1  # an idle one's row, its buckets full
    assert enter(ledger, tenants[0]).requests.remaining == 0  # t0's row kept its level


def test_a_row_whose_requests_are_in_flight_is_not_reused():
    clock = Clock()
    ledger = SharedMemoryLedger(clock, max_tenants=1)
    holder, newcomer = Tenant(name="holder", max_concurrent_requests=5), Tenant(name="newcomer")
    enter(ledger, holder)
    clock.now += ledger_module.IDLE_ROW_S + 1
    with pytest.raises(RuntimeError):
        enter(ledger, newcomer)
    leave(ledger, holder)
    clock.now += ledger_module.IDLE_ROW_S + 1
    assert enter(ledger, newcomer).refused is None


def test_two_gateway_workers_share_one_count(tmp_path, monkeypatch):
    """Outside a server each ledger maps anonymous memory of its own; inside one, a file every worker maps. Two
    ledgers on one such file, as workers 1 and 2, count one tenant together, exactly."""
    monkeypatch.setattr(shared_table, "server_file", lambda name: tmp_path / name)
    context = SimpleNamespace(worker_index=1)
    monkeypatch.setattr(shared, "server_context", context)
    clock = Clock()
    workers = []
    for index in (1, 2):
        context.worker_index = index
        ledger = SharedMemoryLedger(clock)
        ledger._in_flight.open()  # as a worker does when it starts: its own row of the in-flight counts
        workers.append(ledger)
    first, second = workers
    tenant = Tenant(name="acme", requests_per_minute=4, max_concurrent_requests=1)
    assert enter(first, tenant, "a").refused is None
    assert enter(second, tenant, "b").refused == "concurrency"  # the other worker's request holds the slot
    leave(first, tenant, request_id="a")
    assert enter(second, tenant, "c").requests.remaining == 2
    leave(second, tenant, request_id="c")
    assert enter(first, tenant, "d").requests.remaining == 1
    leave(first, tenant, request_id="d")
    assert enter(second, tenant, "e").requests.remaining == 0
    leave(second, tenant, request_id="e")
    assert enter(first, tenant, "f").refused == "requests"


def test_separate_ledgers_outside_a_server_share_nothing():
    first, second = SharedMemoryLedger(Clock()), SharedMemoryLedger(Clock())
    tenant = Tenant(name="acme", requests_per_minute=1)
    assert enter(first, tenant).refused is None and enter(first, tenant).refused == "requests"
    assert enter(second, tenant).refused is None


def test_reading_and_refusal():
    assert reading(5.0, None) is None
    assert reading(2.7, 10) == Reading(10, 2, pytest.approx(43.8))
    assert reading(-5.0, 100) == Reading(100, 0, pytest.approx(63.0))
    assert reading(100.0, 100) == Reading(100, 100, 0.0)
    tenant = Tenant(name="t", requests_per_minute=6, tokens_per_minute=60, max_concurrent_requests=2)
    assert refusal(tenant, 1.0, 0.001, 1) == (None, 0.0)
    assert refusal(tenant, 0.5, 60.0, 0) == ("requests", pytest.approx(5.0))
    assert refusal(tenant, 6.0, 0.0, 0) == ("tokens", pytest.approx(1.0))
    assert refusal(tenant, 6.0, -59.0, 0) == ("tokens", pytest.approx(60.0))
    assert refusal(tenant, 6.0, 60.0, 2) == ("concurrency", CONCURRENCY_RETRY_S)
    assert refusal(Tenant(name="free"), -1.0, -1.0, 10**6) == (None, 0.0)
