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

Calls never mix classes (gateway/queue/priority.py). Live queries take the next call, but never two in a row while
indexing waits: indexing always progresses. While live work keeps coming (one within `INTERACTIVE_RECENT_S`), an
indexing call holds at most the model's pass time budget (`within_budget`: `pass_budget_ms` by the cost model learned
at warm-up, gateway/queue/model_calls.py), a request larger than that leaving in pieces, one call after another: a
query arriving behind them waits for one budget at most, never for a corpus. On a GPU, where two calls may be in flight,
indexing then holds one of them, so a query's call leaves at once. (On a CPU, live queries wait in a coalescer of
their own and run beside the batch in progress: gateway/queue/model_calls.py. Cut to 30 ms, a flood of 10-sentence
requests lost 40 % of its throughput there to the calls' fixed cost, bench/live_beside_indexing.py.)

Bulk-job (batch class) rows leave only when no online request waits, at most one call of them at a time per model
service, whichever gateway worker sends it (`BatchSlot`), and at most one pass in it (`one_pass`); while online
requests keep coming, within the time budget too. Alone, a batch runs full passes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gateway.queue.fair_queue import FairQueue
from gateway.queue.priority import CLASS_ORDER, JOB_CLASSES, ONLINE, Priority
from gateway.shared_memory import SharedCounters
from models.base import Row

Send = Callable[[list[Row]], Awaitable[list[np.ndarray]]]
NO_OUTPUT = np.empty(0)
LIVE, INDEXING, BATCH_CLASS = (CLASS_ORDER[name] for name in JOB_CLASSES)
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
    """A request's rows waiting to leave (`FairQueue` orders them); cut to a time budget, it leaves in pieces."""

    rows: list[Row]
    future: asyncio.Future[list[np.ndarray]]
    alone: bool  # a full pass of a long request: a call of its own
    priority: Priority
    arrival: int
    queued_at: float  # on the coalescer's clock
    taken: int = 0  # rows already sent
    answered: int = 0
    outputs: list[np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        self.outputs = [NO_OUTPUT] * len(self.rows)

    @property
    def rest(self) -> list[Row]:
        return self.rows[self.taken :]

    @property
    def cost(self) -> int:  # its tokens still to send
        return sum(row.length for row in self.rest)

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

    def answer(self, start: int, outputs: list[np.ndarray]) -> None:
        """A piece's outputs; the request's answer once every row has one."""
        self.outputs[start : start + len(outputs)] = outputs
        self.answered += len(outputs)
        if self.answered == len(self.rows) and not self.future.done():
            self.future.set_result(self.outputs)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc) if isinstance(exc, Exception) else self.future.cancel()


@dataclass(frozen=True)
class Piece:
    """The rows of one waiting request that leave in one call: all of them, or a part cut to the time budget."""

    waiting: Waiting
    start: int
    end: int

    @property
    def rows(self) -> list[Row]:
        return self.waiting.rows[self.start : self.end]


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
        within_budget: Callable[[list[Row]], bool] | None = None,
        waited: Callable[[int, float], None] = lambda job_class, seconds: None,
    ) -> None:
        """`send` runs rows on the model service; `max_rows` bounds one call (a larger request goes alone);
        `dropped` hears of each abandoned request's rows that never left; `clock` times the return wait
        (the event loop's unless a test brings its own); `one_pass` tells whether rows fit one forward pass
        (bulk-job calls stop there; unknown: `max_rows`); `batch_slot` is held by a bulk-job call in flight
        (this process's own unless given); a request is recent `interactive_recent_s` on `clock`;
        `within_budget` tells whether rows run within the pass time budget (unknown: always); `waited` hears how
        long each request waited before its first rows left, by class."""
        self._send = send
        self._max_rows = max_rows
        self._dropped = dropped
        self._clock = clock or LoopClock()
        self._one_pass = one_pass or (lambda rows: len(rows) <= max_rows)
        self._within_budget = within_budget or (lambda rows: True)
        self._waited = waited
        self._waiting: FairQueue[Waiting] = FairQueue()
        self._arrivals = itertools.count()
        self._arrived = asyncio.Event()
        self._senders: set[asyncio.Task[None]] = set()
        self._batch_slot = batch_slot or BatchSlot()
        self._interactive_recent_s = interactive_recent_s
        self._retry: asyncio.TimerHandle | None = None
        self._last_arrival = {job_class: float("-inf") for job_class in CLASS_ORDER.values()}  # on `clock`
        self._tenants_seen: dict[str, float] = {}  # when each tenant's online request last arrived
        self._last_class: int | None = None  # of the last call that left
        self._budgeted_in_flight = 0  # indexing or batch calls in flight
        self.max_calls = 1  # calls in flight at once

    async def run(self, rows: list[Row], alone: bool = False, priority: Priority = ONLINE) -> list[np.ndarray]:
        """One output per row, as the model service answered. Cancelling this before the rows left drops them.
        `alone`: a full pass of a long request (`gateway.queue.model_calls.request_parts`), sent in a call of its
        own, so that a short request waiting with it is not held for its pass."""
        future: asyncio.Future[list[np.ndarray]] = asyncio.get_running_loop().create_future()
        now = self._clock.time()
        self._last_arrival[CLASS_ORDER[priority.job_class]] = now
        if not priority.batch:
            self._tenants_seen[priority.tenant] = now
        self._waiting.push(Waiting(rows, future, alone, priority, next(self._arrivals), now))
        self._arrived.set()
        self._start_sender()
        return await future

    def _start_sender(self) -> None:
        self._retry = None
        if self._waiting and len(self._senders) < self.max_calls:
            self._senders.add(asyncio.create_task(self._send_while_waiting()))

    async def _send_while_waiting(self) -> None:
        try:
            while pieces := self._take():
                job_class = pieces[0].waiting.job_class
                self._budgeted_in_flight += job_class != LIVE
                try:
                    await self._send_together(pieces)
                finally:
                    self._budgeted_in_flight -= job_class != LIVE
                    if job_class == BATCH_CLASS:  # `_take` took the slot
                        self._batch_slot.give_back()
                if job_class != BATCH_CLASS:  # after a batch call, no return wait: the next call may be online
                    await self._wait_for_returning(pieces)
        finally:  # at once, not in a done callback: a request arriving meanwhile would find no sender
            self._senders.discard(asyncio.current_task())

    async def _wait_for_returning(self, answered: list[Piece]) -> None:
        """If requests of the answered class wait, and that class leaves next in a call not cut to the time budget,
        give those just answered up to `RETURN_WAIT_S` to come back and join them. While tenants share, only those of
        a tenant with nothing waiting (its next request would otherwise miss the next call and wait for all of it): a
        flooding tenant's rows are there already."""
        waiting, job_class = self._waiting_rows(), answered[0].waiting.job_class
        if not waiting or self._class_order()[:1] != [job_class] or self._budgeted(job_class):
            return  # the next call is another class's, or cut to the budget: nobody need join it
        shared = self._shared()
        quiet = {piece.waiting.tenant for piece in answered} - self._waiting_tenants() if shared else set()
        target = min(self._max_rows, waiting + sum(len(piece.rows) for piece in answered))

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
        return sum(len(waiting.rest) for waiting in self._waiting if not waiting.future.done())

    def _class_order(self) -> list[int]:
        """The waiting classes in the order they may leave now: live first, but indexing after a live call while
        both wait, so that a stream of queries never starves it."""
        classes = self._waiting.classes()
        if classes[:2] == [LIVE, INDEXING] and self._last_class == LIVE:
            return [INDEXING, LIVE, *classes[2:]]
        return classes

    def _take(self) -> list[Piece]:
        """The next call's pieces, of one class (`_class_order`): those whose caller gave up (deadline, disconnect)
        are dropped here, before they cost anything."""
        for job_class in self._class_order():
            if pieces := self._take_class(job_class):
                self._last_class = job_class
                return pieces
        return []

    def _take_class(self, job_class: int) -> list[Piece]:
        """Requests of `job_class` in fair-share order, up to `max_rows` rows (at least one request), a request that
        goes alone by itself; bulk-job rows one pass, and while no call of them is in flight (`batch_slot`; while
        another worker holds it, they try again shortly). An indexing or batch call, while live work keeps coming,
        within the time budget: a request larger than it leaves its first rows now and the rest in later calls.
        None while such a call is in flight already and live work keeps coming (on a GPU, two calls may be)."""
        budgeted = self._budgeted(job_class)
        if budgeted and self._budgeted_in_flight:
            return []
        pieces: list[Piece] = []
        while (head := self._waiting.head(job_class)) is not None:
            if head.future.done():
                self._waiting.pop(job_class, charged=0)
                self._dropped(head.rest)
                continue
            if head.batch and not pieces and not self._batch_slot.take():
                self._try_again_soon()
                break
            rows = self._fitting(pieces, head, budgeted)
            if not rows:
                break
            self._waiting.pop(job_class, charged=sum(row.length for row in rows))
            if not head.taken:
                self._waited(job_class, self._clock.time() - head.queued_at)
            pieces.append(Piece(head, head.taken, head.taken + len(rows)))
            head.taken += len(rows)
            if head.rest:  # cut to the budget: the rest waits where it was, for the next call of its class
                self._waiting.push(head)
                break
        return pieces

    def _fitting(self, pieces: list[Piece], head: Waiting, budgeted: bool) -> list[Row]:
        """The rows of `head` that join this call: all of its rest, or none; the first request, all of its rest
        but, when `budgeted`, only as many as the budget holds (at least one)."""
        rest = head.rest
        if not pieces:
            return self._budget_prefix(rest) if budgeted else rest
        rows = [*self._rows(pieces), *rest]
        joins = not (
            head.alone
            or pieces[0].waiting.alone
            or len(rows) > self._max_rows
            or ((head.batch or self._shared()) and not self._one_pass(rows))
            or (budgeted and not self._within_budget(rows))
        )
        return rest if joins else []

    def _budget_prefix(self, rows: list[Row]) -> list[Row]:
        """The longest prefix of `rows` within the time budget, at least one row (by bisection: the cost grows
        with every row)."""
        if self._within_budget(rows):
            return rows
        low, high = 1, len(rows)  # rows[:low] is taken; rows[:high] is over
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self._within_budget(rows[:middle]) else (low, middle)
        return rows[:low]

    def _budgeted(self, job_class: int) -> bool:
        """Whether a call of `job_class` is held to the time budget now: indexing while live work waits or came
        lately; batch while any online work does."""
        if job_class == LIVE:
            return False
        now, waiting = self._clock.time(), self._waiting.classes()
        before = [c for c in CLASS_ORDER.values() if c < job_class]
        return any(c in waiting or now - self._last_arrival[c] < self._interactive_recent_s for c in before)

    def _try_again_soon(self) -> None:
        """Batch rows wait for the slot: a call of this process's frees it as it returns, another worker's
        only tells the shared counters, so they are looked at again shortly."""
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(BATCH_SLOT_RETRY_S, self._start_sender)

    def _shared(self) -> bool:
        """Whether several tenants sent online requests within `interactive_recent_s`: then a call holds one
        pass, so that a tenant whose request arrives behind another's flood waits at most one pass for the call
        in flight, then leaves first (gateway/queue/fair_queue.py)."""
        now = self._clock.time()
        for tenant, seen in list(self._tenants_seen.items()):
            if now - seen >= self._interactive_recent_s:
                del self._tenants_seen[tenant]
        return len(self._tenants_seen) > 1

    @staticmethod
    def _rows(pieces: list[Piece]) -> list[Row]:
        return [row for piece in pieces for row in piece.rows]

    async def _send_together(self, pieces: list[Piece]) -> None:
        try:
            outputs = await self._send(self._rows(pieces))
        except BaseException as exc:  # every request of the call gets the call's error
            for piece in pieces:
                piece.waiting.fail(exc)
            if not isinstance(exc, Exception):
                raise
            return
        start = 0
        for piece in pieces:
            piece.waiting.answer(piece.start, outputs[start : start + len(piece.rows)])
            start += len(piece.rows)
