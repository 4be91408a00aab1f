"""Readiness is the server's: a gateway worker whose models are warm says ready only once every worker of its
server is (they share the count), so no request reaches a worker still warming up. The real servers with two
workers are in tests/server/test_gateway_workers.py."""

from __future__ import annotations

import asyncio

from gateway.served.registry import ModelRegistry
from gateway.shared_memory import SharedCounters
from gateway.startup.lifecycle import WARM_WORKERS, Lifecycle
from tests.unit.gateway.served.test_warmup import info


def warm_lifecycle(counters: SharedCounters, workers: int) -> Lifecycle:
    """A worker's lifecycle whose warm-up has finished (its registry opened as the reconciler opens it)."""
    lifecycle = Lifecycle(ModelRegistry({"m": "embed"}), counters, lambda: workers)
    lifecycle.registry.opened({"m": (info("m"), None)}, {})
    return lifecycle


def test_one_worker_is_ready_once_warm():
    lifecycle = Lifecycle(ModelRegistry({"m": "embed"}), SharedCounters([WARM_WORKERS]))
    assert not asyncio.run(lifecycle.is_ready())
    lifecycle.registry.opened({"m": (info("m"), None)}, {})
    assert asyncio.run(lifecycle.is_ready())


def test_a_warm_worker_waits_for_the_others_of_its_server():
    counters = SharedCounters([WARM_WORKERS])
    lifecycle = warm_lifecycle(counters, workers=2)
    assert not asyncio.run(lifecycle.is_ready())
    assert not asyncio.run(lifecycle.is_ready())  # asking again does not count this worker twice
    counters.open()[2, counters.names[WARM_WORKERS]] = 1  # worker 2's row: it is warm too
    assert asyncio.run(lifecycle.is_ready())


def test_a_worker_restarted_after_a_crash_takes_its_server_out_until_it_is_warm():
    counters = SharedCounters([WARM_WORKERS])
    lifecycle = warm_lifecycle(counters, workers=2)
    column = counters.names[WARM_WORKERS]
    counters.open()[2, column] = 1
    assert asyncio.run(lifecycle.is_ready())
    counters.open()[2, column] = 0  # as `SharedCounters.open` zeroes the row of a worker restarted under its index
    assert not asyncio.run(lifecycle.is_ready())
