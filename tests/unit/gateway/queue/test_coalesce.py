"""The gateway's coalescer: concurrent requests leave as one model-service call, without mixing answers."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from gateway.queue import coalesce
from gateway.queue.coalesce import RETURN_WAIT_S, BatchSlot, Coalescer, batch_call_counter
from gateway.queue.priority import BATCH, Priority
from gateway.shared_memory import SharedCounters
from models.base import TokenizedText


def rows(request: str, count: int) -> list[TokenizedText]:
    return [TokenizedText(model="m", input_ids=[i + 1], request_id=request) for i in range(count)]


class FakeModelService:
    """Answers each row with [request number, position]; records every call; waits until released."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail = False

    async def send(self, batch: list[TokenizedText]) -> list[np.ndarray]:
        self.calls.append([row.request_id for row in batch])
        await self.release.wait()
        if self.fail:
            raise ConnectionError("model service gone")
        return [np.array([float(row.request_id), float(row.input_ids[0])]) for row in batch]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def one_call_in_flight(
    service: FakeModelService, max_rows: int = 64, **options: Any
) -> tuple[Coalescer, asyncio.Task[list[np.ndarray]]]:
    """A coalescer over `service` whose first request ("1", one row) has left in a call."""
    coalescer = Coalescer(service.send, max_rows=max_rows, **options)
    first = asyncio.create_task(coalescer.run(rows("1", 1)))
    await settle()
    return coalescer, first


async def one_waiting_behind_it(
    service: FakeModelService, **options: Any
) -> tuple[Coalescer, asyncio.Task[list[np.ndarray]], asyncio.Task[list[np.ndarray]]]:
    """As `one_call_in_flight`, and request "2" (one row) waiting for that call to return."""
    coalescer, first = await one_call_in_flight(service, **options)
    waiting = asyncio.create_task(coalescer.run(rows("2", 1)))
    await settle()
    return coalescer, first, waiting


class StoppedClock:
    """A clock that moves only when the test moves it: the coalescer's return wait lasts until its clients
    arrive or the test moves past it, however long the host takes to schedule them."""

    def __init__(self) -> None:
        self.now = 0.0
        self._moved = asyncio.Event()

    def time(self) -> float:
        return self.now

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        deadline = self.now + timeout
        while not event.is_set():
            if self.now >= deadline:
                return False
            self._moved.clear()
            either = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._moved.wait())]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            for waiter in either:
                waiter.cancel()
        return True

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._moved.set()


def test_requests_arriving_during_a_call_leave_together_in_one_call():
    async def scenario() -> None:
        service = FakeModelService()
        coalescer = Coalescer(service.send, max_rows=64)
        first = asyncio.create_task(coalescer.run(rows("1", 2)))
        await settle()
        assert service.calls == [["1", "1"]]  # alone: left at once
        later = [asyncio.create_task(coalescer.run(rows(str(n), n))) for n in (2, 3, 4)]
        await settle()
        assert len(service.calls) == 1  # waiting for the call in flight
        service.release.set()
        answers = await asyncio.gather(first, *later)
        assert service.calls[1] == ["2"] * 2 + ["3"] * 3 + ["4"] * 4  # one call for the three
        for request, answer in zip((1, 2, 3, 4), answers):
            assert [list(a) for a in answer] == [[request, i + 1] for i in range(len(answer))]
            assert len(answer) == (2 if request == 1 else request)

    asyncio.run(scenario())


def test_a_call_holds_at_most_max_rows_unless_one_request_is_larger():
    async def scenario() -> None:
        service = FakeModelService()
        coalescer, first = await one_call_in_flight(service, max_rows=5)
        later = [asyncio.create_task(coalescer.run(rows(str(n), count))) for n, count in ((2, 3), (3, 3), (4, 9))]
        await settle()
        service.release.set()
        await asyncio.gather(first, *later)
        assert [sorted(set(call)) for call in service.calls] == [["1"], ["2"], ["3"], ["4"]]

    asyncio.run(scenario())


def test_a_pass_of_a_long_request_goes_in_a_call_of_its_own():
    async def scenario() -> None:
        service = FakeModelService()
        coalescer, first = await one_call_in_flight(service)
        later = [
            asyncio.create_task(coalescer.run(rows("2", 1))),
            asyncio.create_task(coalescer.run(rows("3", 4), alone=True)),
            asyncio.create_task(coalescer.run(rows("4", 1))),
            asyncio.create_task(coalescer.run(rows("5", 1))),
        ]
        await settle()
        service.release.set()
        await asyncio.gather(first, *later)
        assert service.calls[1:] == [["2"], ["3"] * 4, ["4", "5"]]  # the short ones are not held for the pass

    asyncio.run(scenario())


def test_a_request_abandoned_before_its_call_is_never_sent():
    async def scenario() -> None:
        service = FakeModelService()
        dropped: list[str] = []
        coalescer, first = await one_call_in_flight(
            service, dropped=lambda gone_rows: dropped.extend(row.request_id for row in gone_rows)
        )
        gone = asyncio.create_task(coalescer.run(rows("2", 3)))
        kept = asyncio.create_task(coalescer.run(rows("3", 1)))
        await settle()
        gone.cancel()  # the deadline passed, or the client left
        service.release.set()
        await asyncio.gather(first, kept)
        assert service.calls == [["1"], ["3"]]
        assert dropped == ["2", "2", "2"]  # counted as dropped

    asyncio.run(scenario())


def test_a_failed_call_fails_each_of_its_requests_and_the_next_call_still_goes():
    async def scenario() -> None:
        service = FakeModelService()
        service.fail = True
        coalescer, first, second = await one_waiting_behind_it(service)
        service.release.set()
        for task in (first, second):
            with pytest.raises(ConnectionError):
                await task
        service.fail = False
        assert [list(a) for a in await coalescer.run(rows("5", 1))] == [[5.0, 1.0]]

    asyncio.run(scenario())


def test_after_a_call_returns_the_next_one_waits_briefly_for_the_clients_just_answered():
    async def scenario() -> None:
        service = FakeModelService()
        coalescer, first, waiting = await one_waiting_behind_it(service, clock=StoppedClock())
        service.release.set()
        await first
        back = asyncio.create_task(coalescer.run(rows("3", 1)))  # the answered client comes straight back
        await asyncio.wait_for(asyncio.gather(waiting, back), timeout=5)
        assert service.calls == [["1"], ["2", "3"]]

    asyncio.run(scenario())


def test_the_wait_for_answered_clients_ends_after_return_wait_s():
    async def scenario() -> None:
        service = FakeModelService()
        clock = StoppedClock()
        _, first, waiting = await one_waiting_behind_it(service, clock=clock)
        service.release.set()
        await first
        await settle()
        assert service.calls == [["1"]]  # held for the client just answered
        clock.advance(RETURN_WAIT_S / 2)
        await settle()
        assert service.calls == [["1"]]
        clock.advance(RETURN_WAIT_S / 2)  # nobody came back: it leaves anyway
        await asyncio.wait_for(waiting, timeout=5)
        assert service.calls == [["1"], ["2"]]

    asyncio.run(scenario())


def test_the_wait_for_answered_clients_is_bounded_and_skipped_when_nothing_waits():
    async def scenario() -> None:
        service = FakeModelService()
        service.release.set()
        coalescer, first = await one_call_in_flight(service)
        waiting = asyncio.create_task(coalescer.run(rows("2", 1)))
        await asyncio.wait_for(asyncio.gather(first, waiting), timeout=5)  # nobody came back: it left anyway
        assert service.calls == [["1"], ["2"]]
        await asyncio.wait_for(coalescer.run(rows("3", 1)), timeout=5)
        assert service.calls[-1] == ["3"]  # alone, with nothing in flight: sent at once

    asyncio.run(scenario())


def test_a_request_right_after_the_last_call_returned_is_sent():
    """The sender leaves the moment nothing waits; a request arriving just after must start another."""

    async def scenario() -> None:
        service = FakeModelService()
        service.release.set()
        coalescer = Coalescer(service.send, max_rows=64)
        for request in ("1", "2", "3"):  # each run() called in the same step as the last answer's wake-up
            answer = await coalescer.run(rows(request, 1))
            assert [list(a) for a in answer] == [[float(request), 1.0]]

    asyncio.run(asyncio.wait_for(scenario(), timeout=5))


def test_with_two_calls_allowed_the_next_leaves_while_one_runs():
    async def scenario() -> None:
        service = FakeModelService()
        coalescer = Coalescer(service.send, max_rows=64)
        coalescer.max_calls = 2
        first = asyncio.create_task(coalescer.run(rows("1", 1)))
        await settle()
        second = asyncio.create_task(coalescer.run(rows("2", 1)))
        await settle()
        assert service.calls == [["1"], ["2"]]  # both in flight
        later = [asyncio.create_task(coalescer.run(rows(str(n), 1))) for n in (3, 4)]
        await settle()
        assert len(service.calls) == 2  # no third call while two run
        service.release.set()
        answers = await asyncio.gather(first, second, *later)
        assert [a[0][0] for a in answers] == [1, 2, 3, 4]
        assert ["3", "4"] in service.calls  # the waiting ones left together

    asyncio.run(scenario())


def test_interactive_requests_leave_first_by_priority_level_then_batch_rows():
    async def scenario() -> None:
        service = FakeModelService()
        coalescer, first = await one_call_in_flight(service)
        later = [
            asyncio.create_task(coalescer.run(rows("10", 1), priority=BATCH)),
            asyncio.create_task(coalescer.run(rows("11", 1), priority=BATCH)),
            asyncio.create_task(coalescer.run(rows("2", 1))),
            asyncio.create_task(coalescer.run(rows("3", 1), priority=Priority(level=-1))),
        ]
        await settle()
        service.release.set()
        await asyncio.gather(first, *later)
        # Level -1 before the default 0, both before any batch row; batch rows never share a call with them.
        assert service.calls == [["1"], ["3", "2"], ["10", "11"]]

    asyncio.run(scenario())


def batch_calls_after_an_interactive_one(one_pass_rows: int, **options: Any) -> list[list[str]]:
    """The calls of six batch rows waiting behind an interactive request, passes holding `one_pass_rows`."""

    async def scenario() -> list[list[str]]:
        service = FakeModelService()
        coalescer, first = await one_call_in_flight(
            service, one_pass=lambda batch: len(batch) <= one_pass_rows, **options
        )
        later = [asyncio.create_task(coalescer.run(rows(str(n), 1), priority=BATCH)) for n in range(10, 16)]
        await settle()
        service.release.set()
        await asyncio.gather(first, *later)
        return service.calls[1:]

    return asyncio.run(scenario())


def test_batch_rows_leave_one_pass_per_call_when_no_interactive_request_came_lately():
    calls = batch_calls_after_an_interactive_one(4, interactive_recent_s=0.0)
    assert calls == [["10", "11", "12", "13"], ["14", "15"]]


def test_batch_calls_hold_the_time_budget_while_online_requests_keep_coming():
    calls = batch_calls_after_an_interactive_one(4, within_budget=lambda batch: len(batch) <= 2)
    assert calls == [["10", "11"], ["12", "13"], ["14", "15"]]


def test_batch_calls_hold_a_whole_pass_once_online_requests_stopped():
    calls = batch_calls_after_an_interactive_one(4, interactive_recent_s=0.0, within_budget=lambda batch: False)
    assert calls == [["10", "11", "12", "13"], ["14", "15"]]


def test_one_batch_call_at_a_time_so_an_interactive_request_waits_for_one_pass_at_most():
    async def scenario() -> None:
        service = FakeModelService()
        coalescer = Coalescer(service.send, max_rows=64, one_pass=lambda batch: len(batch) <= 1)
        coalescer.max_calls = 2  # as on a GPU
        batch = [asyncio.create_task(coalescer.run(rows(str(n), 1), priority=BATCH)) for n in (10, 11)]
        await settle()
        assert service.calls == [["10"]]  # the second batch pass waits although a second call may leave
        interactive = asyncio.create_task(coalescer.run(rows("2", 1)))
        await settle()
        assert service.calls == [["10"], ["2"]]  # left at once, beside the one batch pass
        service.release.set()
        await asyncio.gather(*batch, interactive)
        assert service.calls[2:] == [["11"]]

    asyncio.run(scenario())


class WatchedSlot(BatchSlot):
    """A `BatchSlot` that tells when it has refused `refusals` times."""

    def __init__(self, counters: SharedCounters, model_service: str, refusals: int) -> None:
        super().__init__(counters, model_service)
        self.refused = asyncio.Event()
        self._refusals = refusals

    def take(self) -> bool:
        taken = super().take()
        if not taken:
            self._refusals -= 1
            if self._refusals <= 0:
                self.refused.set()
        return taken


def test_one_batch_call_per_model_service_across_gateway_workers():
    """Two workers' coalescers on one server's shared counters: the second's batch rows wait for the first's
    batch call to return (refused the slot again and again, never sent), then leave by themselves; its
    interactive rows do not wait."""

    async def scenario() -> None:
        counters = SharedCounters([batch_call_counter("TextEmbedder")])
        first, second = FakeModelService(), FakeModelService()
        slot = WatchedSlot(counters, "TextEmbedder", refusals=3)
        workers = [
            Coalescer(first.send, max_rows=64, batch_slot=BatchSlot(counters, "TextEmbedder")),
            Coalescer(second.send, max_rows=64, batch_slot=slot),
        ]
        running = asyncio.create_task(workers[0].run(rows("10", 1), priority=BATCH))
        await settle()
        waiting = asyncio.create_task(workers[1].run(rows("20", 1), priority=BATCH))
        await asyncio.wait_for(slot.refused.wait(), 10.0)  # it tried twice more after its first look
        assert (first.calls, second.calls) == ([["10"]], [])
        interactive = asyncio.create_task(workers[1].run(rows("2", 1)))
        await settle()
        assert second.calls == [["2"]]
        second.release.set()
        await interactive
        first.release.set()
        await running
        await asyncio.wait_for(waiting, 10.0)  # the slot was given back: the second worker's batch call left
        assert second.calls == [["2"], ["20"]]

    asyncio.run(scenario())


# Tenants: fair shares of a saturated model service (gateway/queue/fair_queue.py)

TENANT_A, TENANT_B = Priority(tenant="a"), Priority(tenant="b")


class SteppedModelService:
    """As `FakeModelService`, but each call waits for its own release: the test returns calls one at a time."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self._releases: list[asyncio.Event] = []

    async def send(self, batch: list[TokenizedText]) -> list[np.ndarray]:
        self.calls.append([row.request_id for row in batch])
        release = asyncio.Event()
        self._releases.append(release)
        await release.wait()
        return [np.array([float(row.request_id), float(row.input_ids[0])]) for row in batch]

    def release(self, call: int) -> None:
        self._releases[call].set()

    def release_all(self) -> None:
        for release in self._releases:
            release.set()


async def until(condition, steps: int = 1000) -> None:
    """Let the loop run until `condition` holds (no clock involved: every step is the loop's own)."""
    for _ in range(steps):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def return_call(service: SteppedModelService, clock: StoppedClock, call: int) -> None:
    """Let call `call` return, then the return wait end (nobody answered comes back), and the next call leave."""
    service.release(call)
    await settle()
    clock.advance(RETURN_WAIT_S)
    await until(lambda: len(service.calls) > call + 1)


async def run_out(service: SteppedModelService, clock: StoppedClock, tasks: list[asyncio.Task]) -> list:
    """Return every call, now and later, until every request is answered; their answers."""
    for _ in range(1000):
        if all(task.done() for task in tasks):
            return [task.result() for task in tasks]
        service.release_all()
        clock.advance(RETURN_WAIT_S)
        await asyncio.sleep(0)
    raise AssertionError("requests still waiting")


def passes_of_four(service: SteppedModelService, clock: StoppedClock) -> Coalescer:
    return Coalescer(service.send, max_rows=64, clock=clock, one_pass=lambda batch: len(batch) <= 4)


def test_a_tenants_request_behind_anothers_flood_leaves_first_in_the_next_call():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer = passes_of_four(service, clock)
        tasks = [asyncio.create_task(coalescer.run(rows("20", 1), priority=TENANT_B))]
        await until(lambda: service.calls == [["20"]])  # alone: left at once
        tasks += [asyncio.create_task(coalescer.run(rows(str(n), 1), priority=TENANT_A)) for n in range(2, 10)]
        await settle()
        await return_call(service, clock, 0)
        assert service.calls[1] == ["2", "3", "4", "5"]  # two tenants lately: one pass, not all of a's flood
        tasks.append(asyncio.create_task(coalescer.run(rows("21", 1), priority=TENANT_B)))
        await settle()
        await return_call(service, clock, 1)
        assert service.calls[2] == ["21", "6", "7", "8"]  # b's request first, ahead of a's waiting rows
        answers = await run_out(service, clock, tasks)
        assert service.calls == [["20"], ["2", "3", "4", "5"], ["21", "6", "7", "8"], ["9"]]
        assert [answer[0][0] for answer in answers] == [20, *range(2, 10), 21]  # each its own outputs

    asyncio.run(scenario())


def test_with_one_tenant_a_call_takes_every_waiting_row_as_before():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer = passes_of_four(service, clock)
        tasks = [asyncio.create_task(coalescer.run(rows("1", 1), priority=TENANT_A))]
        await until(lambda: len(service.calls) == 1)
        tasks += [asyncio.create_task(coalescer.run(rows(str(n), 1), priority=TENANT_A)) for n in range(2, 10)]
        await settle()
        await run_out(service, clock, tasks)
        assert service.calls == [["1"], ["2", "3", "4", "5", "6", "7", "8", "9"]]  # past one pass: one tenant

    asyncio.run(scenario())


def test_calls_take_everything_again_once_the_other_tenant_has_been_quiet():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer = passes_of_four(service, clock)
        tasks = [asyncio.create_task(coalescer.run(rows("20", 1), priority=TENANT_B))]
        await until(lambda: len(service.calls) == 1)
        tasks += [asyncio.create_task(coalescer.run(rows(str(n), 1), priority=TENANT_A)) for n in range(2, 10)]
        await settle()
        clock.advance(coalesce.INTERACTIVE_RECENT_S)  # b sent nothing for a second (nor a: its rows wait)
        await run_out(service, clock, tasks)
        assert service.calls == [["20"], ["2", "3", "4", "5", "6", "7", "8", "9"]]

    asyncio.run(scenario())


def test_tenants_share_a_call_by_weight():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer = passes_of_four(service, clock)
        heavy = Priority(tenant="heavy", weight=3.0)
        tasks = [asyncio.create_task(coalescer.run(rows("1", 1), priority=TENANT_A))]
        await until(lambda: len(service.calls) == 1)
        tasks += [asyncio.create_task(coalescer.run(rows(str(n), 1), priority=TENANT_A)) for n in range(10, 18)]
        tasks += [asyncio.create_task(coalescer.run(rows(str(n), 1), priority=heavy)) for n in range(20, 28)]
        await settle()
        await return_call(service, clock, 0)
        await return_call(service, clock, 1)
        assert service.calls[1:] == [["10", "20", "21", "22"], ["11", "23", "24", "25"]]  # three of heavy's to one
        await run_out(service, clock, tasks)
        assert sorted(row for call in service.calls for row in call) == sorted(
            ["1", *map(str, range(10, 18)), *map(str, range(20, 28))]
        )

    asyncio.run(scenario())


def test_a_tenants_priority_orders_only_its_own_requests():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer = passes_of_four(service, clock)
        tasks = [asyncio.create_task(coalescer.run(rows("1", 1), priority=TENANT_A))]
        await until(lambda: len(service.calls) == 1)
        tasks += [asyncio.create_task(coalescer.run(rows(str(n), 1), priority=TENANT_B)) for n in (20, 21, 22)]
        tasks += [asyncio.create_task(coalescer.run(rows(str(n), 1), priority=TENANT_A)) for n in (10, 11)]
        tasks.append(asyncio.create_task(coalescer.run(rows("12", 1), priority=Priority(level=-5, tenant="a"))))
        await settle()
        await run_out(service, clock, tasks)
        # a's urgent request goes before a's others, not before b's share: a and b alternate.
        assert service.calls == [["1"], ["20", "12", "21", "10"], ["22", "11"]]

    asyncio.run(scenario())
