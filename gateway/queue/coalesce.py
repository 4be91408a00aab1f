"""Concurrent requests for one model service leave the gateway as one call.

A call to a model service costs about a millisecond of CPU on each side (HTTP, validation, pickling,
BentoML's dispatcher), as much as the forward pass of a short sentence in a batch. So while one call is in
flight, the requests that arrive wait here, and leave together when it returns: under load the model
service sees one batch-sized call per forward pass instead of one per request. A request that finds
nothing in flight leaves at once, so one request at a time pays no wait.

When a call returns while others wait, the next call waits a little longer (at most `RETURN_WAIT_S`) for
the clients just answered: under a closed loop they come straight back, and without the wait the
in-flight requests split into two halves that take turns, each a half-size batch. The wait also lets the
gateway write those answers while the model service is idle instead of during its next forward pass, where
every bit of CPU taken from a torch thread stalls the others. all-MiniLM-L6-v2 on 2 cores, alternating
runs: 32 in flight x 1 sentence 187-202 sent/s against 155-194 without it, 8 x 10 290-309 against 268-293;
one request at a time is not held (nothing waits when its call returns).

For a model service on a GPU, `max_calls` is 2: the next call leaves while one runs and waits in the model
service's queue, so the model service starts it the moment the first returns, and the gateway writes the
first one's answers while the second runs. With one call at a time, a closed loop alternates: the gateway
idle while the device runs a call, then the device idle while the gateway answers it (simulated small
model, 64 clients x 32 sentences: 3,599 sent/s and the device 43 % busy with one call; see
bench/simulated_device.py). On CPU the model service needs the gateway's cores itself: one call.

Waiting requests leave in priority order (gateway/queue/priority.py): interactive ones first, then by tenants'
weighted shares (gateway/queue/fair_queue.py), each tenant's by level, then by arrival. While several tenants send
requests, a call holds one pass: a call of every waiting row would keep a light tenant's request behind all of a
flooding tenant's rows in flight, whatever order they left in. And the return wait is only for a tenant with nothing
waiting.

Bulk-job (batch class) rows never share a call with interactive ones, leave only when no interactive request
waits, at most one call of them at a time per model service, whichever gateway worker sends it (`BatchSlot`),
and at most one pass in it (`one_pass`): an interactive request arriving behind them waits for that pass at
most. While interactive requests keep coming (one within `INTERACTIVE_RECENT_S`), a batch call holds half a
pass: on 2 cores (shared with two idle servers), with full passes beside 5 single-sentence requests a second,
their p99 was 127 ms against 28 ms alone; with half passes 73 ms against 33, the batch doing 307 inputs/s
instead of 341 (bench/batch_jobs.py). Alone, a batch runs full passes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gateway.queue.fair_queue import FairQueue
from gateway.queue.priority import CLASS_ORDER, INTERACTIVE, Priority
from gateway.shared_memory import SharedCounters
from models.base import Row

Send = Callable[[list[Row]], Awaitable[list[np.ndarray]]]
RETURN_WAIT_S = 0.005
INTERACTIVE_RECENT_S = 1.0
BATCH_SLOT_RETRY_S = 0.005  # how soon batch rows try again for the slot another gateway worker holds


def batch_call_counter(model_service: str) -> str:
    """The shared counter of a model service's batch calls in flight (`BatchSlot`)."""
    return f"{model_service}.batch_calls"


class BatchSlot:
    """The one batch call a model service may have in flight: server-wide with the gateway workers' shared
    counters (a worker that dies holding it frees it when restarted, gateway/shared_memory.py), else this process's."""

    def __init__(self, counters: SharedCounters | None = None, model_service: str = "") -> None:
        self._counters = counters
        self._name = batch_call_counter(model_service)
        self._held = False

    def take(self) -> bool:
        if self._counters is None:
            taken, self._held = not self._held, True
            return taken
        with self._counters.locked():
            if self._counters.total(self._name):
                return False
            self._counters.add(self._name, 1)
            return True

    def give_back(self) -> None:
        if self._counters is None:
            self._held = False
            return
        with self._counters.locked():
            self._counters.add(self._name, -1)


@dataclass
class Waiting:
    """A request's rows waiting to leave (`FairQueue` orders them)."""

    rows: list[Row]
    future: asyncio.Future[list[np.ndarray]]
    alone: bool  # a full pass of a long request: a call of its own
    priority: Priority
    arrival: int
    cost: int = field(init=False)  # its tokens

    def __post_init__(self) -> None:
        self.cost = sum(row.length for row in self.rows)

    @property
    def batch(self) -> bool:  # a bulk job's rows
        return self.priority.batch

    @property
    def job_class(self) -> int:
        return CLASS_ORDER[self.priority.job_class]

    @property
    def level(self) -> int:
        return self.priority.level

    @property
    def tenant(self) -> str:
        return self.priority.tenant

    @property
    def weight(self) -> float:
        return self.priority.weight


class Clock(Protocol):
    """What the return wait measures time with: the event loop's clock here, one a test moves in tests."""

    def time(self) -> float: ...

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        """Whether `event` was set within `timeout` seconds."""
        ...


class LoopClock:
    """The running event loop's clock."""

    def time(self) -> float:
        return asyncio.get_running_loop().time()

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True


class Coalescer:
    def __init__(
        self,
        send: Send,
        max_rows: int,
        dropped: Callable[[list[Row]], None] = lambda rows: None,
        clock: Clock | None = None,
        one_pass: Callable[[list[Row]], bool] | None = None,
        batch_slot: BatchSlot | None = None,
        interactive_recent_s: float = INTERACTIVE_RECENT_S,
    ) -> None:
        """`send` runs rows on the model service; `max_rows` bounds one call (a larger request goes alone);
        `dropped` hears of each abandoned request's rows that never left; `clock` times the return wait
        (the event loop's unless a test brings its own); `one_pass` tells whether rows fit one forward pass
        (bulk-job calls stop there; unknown: `max_rows`); `batch_slot` is held by a bulk-job call in flight
        (this process's own unless given); an interactive request is recent `interactive_recent_s` on `clock`."""
        self._send = send
        self._max_rows = max_rows
        self._dropped = dropped
        self._clock = clock or LoopClock()
        self._one_pass = one_pass or (lambda rows: len(rows) <= max_rows)
        self._waiting: FairQueue[Waiting] = FairQueue()
        self._arrivals = itertools.count()
        self._arrived = asyncio.Event()
        self._senders: set[asyncio.Task[None]] = set()
        self._batch_slot = batch_slot or BatchSlot()
        self._interactive_recent_s = interactive_recent_s
        self._retry: asyncio.TimerHandle | None = None
        self._last_interactive = float("-inf")  # when an interactive request last arrived, on `clock`
        self._tenants_seen: dict[str, float] = {}  # when each tenant's interactive request last arrived
        self.max_calls = 1  # calls in flight at once

    async def run(self, rows: list[Row], alone: bool = False, priority: Priority = INTERACTIVE) -> list[np.ndarray]:
        """One output per row, as the model service answered. Cancelling this before the rows left drops them.
        `alone`: a full pass of a long request (`gateway.queue.model_calls.request_parts`), sent in a call of its
        own, so that a short request waiting with it is not held for its pass."""
        future: asyncio.Future[list[np.ndarray]] = asyncio.get_running_loop().create_future()
        if not priority.batch:
            self._last_interactive = self._tenants_seen[priority.tenant] = self._clock.time()
        self._waiting.push(Waiting(rows, future, alone, priority, next(self._arrivals)))
        self._arrived.set()
        self._start_sender()
        return await future

    def _start_sender(self) -> None:
        self._retry = None
        if self._waiting and len(self._senders) < self.max_calls:
            self._senders.add(asyncio.create_task(self._send_while_waiting()))

    async def _send_while_waiting(self) -> None:
        try:
            while batch := self._take():
                if not batch[0].batch:
                    await self._send_together(batch)
                    await self._wait_for_returning(batch)
                    continue
                try:  # `_take` took the slot; and no return wait after it: the next call may be interactive
                    await self._send_together(batch)
                finally:
                    self._batch_slot.give_back()
        finally:  # at once, not in a done callback: a request arriving meanwhile would find no sender
            self._senders.discard(asyncio.current_task())

    async def _wait_for_returning(self, answered: list[Waiting]) -> None:
        """If requests wait, give those just answered up to `RETURN_WAIT_S` to come back and join them. While
        tenants share, only those of a tenant with nothing waiting (its next request would otherwise miss the next
        call and wait for all of it): a flooding tenant's rows are there already."""
        waiting = self._waiting_rows()
        if not waiting:
            return
        shared = self._shared()
        quiet = {item.tenant for item in answered} - self._waiting_tenants() if shared else set()
        target = min(self._max_rows, waiting + sum(len(item.rows) for item in answered))

        def back() -> bool:
            if shared:
                return not quiet or bool(quiet & self._waiting_tenants())
            return self._waiting_rows() >= target

        deadline = self._clock.time() + RETURN_WAIT_S
        while not back():
            left = deadline - self._clock.time()
            if left <= 0:
                return
            self._arrived.clear()
            if not await self._clock.wait(self._arrived, left):
                return

    def _waiting_tenants(self) -> set[str]:
        return {item.tenant for item in self._waiting if not item.future.done()}

    def _waiting_rows(self) -> int:
        return sum(len(waiting.rows) for waiting in self._waiting if not waiting.future.done())

    def _take(self) -> list[Waiting]:
        """The next call's requests, in priority order, up to `max_rows` rows (at least one request), a request
        that goes alone by itself; bulk-job rows only by themselves, one pass, and while no call of them is in
        flight (`batch_slot`; while another worker holds it, they try again shortly). Those whose caller gave up
        (deadline, disconnect) are dropped here, before they cost anything."""
        taken: list[Waiting] = []
        count = 0
        shared = self._shared()
        while (head := self._waiting.head()) is not None:
            if not head.future.done():
                if head.batch and taken and not taken[0].batch:
                    break
                if head.batch and not taken and not self._batch_slot.take():
                    self._try_again_soon()
                    break
                if taken and (
                    head.alone
                    or taken[0].alone
                    or count + len(head.rows) > self._max_rows
                    or (head.batch and not self._fits_batch_call([*self._rows(taken), *head.rows]))
                    or (shared and not self._one_pass([*self._rows(taken), *head.rows]))
                ):
                    break
            self._waiting.pop(charge=not head.future.done())
            if head.future.done():
                self._dropped(head.rows)
            else:
                taken.append(head)
                count += len(head.rows)
        return taken

    def _try_again_soon(self) -> None:
        """Batch rows wait for the slot: a call of this process's frees it as it returns, another worker's
        only tells the shared counters, so they are looked at again shortly."""
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(BATCH_SLOT_RETRY_S, self._start_sender)

    def _shared(self) -> bool:
        """Whether several tenants sent interactive requests within `interactive_recent_s`: then a call holds one
        pass, so that a tenant whose request arrives behind another's flood waits at most one pass for the call
        in flight, then leaves first (gateway/queue/fair_queue.py)."""
        now = self._clock.time()
        for tenant, seen in list(self._tenants_seen.items()):
            if now - seen >= self._interactive_recent_s:
                del self._tenants_seen[tenant]
        return len(self._tenants_seen) > 1

    def _fits_batch_call(self, rows: list[Row]) -> bool:
        """One pass, or half of one (the rows twice over fit a pass) while interactive requests keep coming."""
        recent = self._clock.time() - self._last_interactive < self._interactive_recent_s
        return self._one_pass(rows + rows if recent else rows)

    @staticmethod
    def _rows(batch: list[Waiting]) -> list[Row]:
        return [row for waiting in batch for row in waiting.rows]

    async def _send_together(self, batch: list[Waiting]) -> None:
        try:
            outputs = await self._send(self._rows(batch))
        except BaseException as exc:  # every request of the call gets the call's error
            for waiting in batch:
                if not waiting.future.done():
                    waiting.future.set_exception(exc) if isinstance(exc, Exception) else waiting.future.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        start = 0
        for waiting in batch:
            if not waiting.future.done():
                waiting.future.set_result(outputs[start : start + len(waiting.rows)])
            start += len(waiting.rows)
