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
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

import numpy as np

from models.base import Row

Send = Callable[[list[Row]], Awaitable[list[np.ndarray]]]
Waiting = tuple[list[Row], "asyncio.Future[list[np.ndarray]]", bool]  # rows, their answer, whether they go alone
RETURN_WAIT_S = 0.005


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
    def __init__(self, send: Send, max_rows: int, dropped: Callable[[list[Row]], None] = lambda rows: None,
                 clock: Clock | None = None) -> None:
        """`send` runs rows on the model service; `max_rows` bounds one call (a larger request goes alone);
        `dropped` hears of each abandoned request's rows that never left; `clock` times the return wait
        (the event loop's unless a test brings its own)."""
        self._send = send
        self._max_rows = max_rows
        self._dropped = dropped
        self._clock = clock or LoopClock()
        self._waiting: deque[Waiting] = deque()
        self._arrived = asyncio.Event()
        self._senders: set[asyncio.Task[None]] = set()
        self.max_calls = 1  # calls in flight at once

    async def run(self, rows: list[Row], alone: bool = False) -> list[np.ndarray]:
        """One output per row, as the model service answered. Cancelling this before the rows left drops them.
        `alone`: a full pass of a long request (`gateway.model_calls.passes`), sent in a call of its own, so
        that a short request waiting with it is not held for its pass."""
        future: asyncio.Future[list[np.ndarray]] = asyncio.get_running_loop().create_future()
        self._waiting.append((rows, future, alone))
        self._arrived.set()
        if len(self._senders) < self.max_calls:
            self._senders.add(asyncio.create_task(self._send_while_waiting()))
        return await future

    async def _send_while_waiting(self) -> None:
        try:
            while batch := self._take():
                await self._send_together(batch)
                await self._wait_for_returning(sum(len(rows) for rows, _, _ in batch))
        finally:  # at once, not in a done callback: a request arriving meanwhile would find no sender
            self._senders.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def _wait_for_returning(self, answered_rows: int) -> None:
        """If requests wait, give those just answered up to `RETURN_WAIT_S` to come back and join them."""
        waiting = self._waiting_rows()
        if not waiting:
            return
        target = min(self._max_rows, waiting + answered_rows)
        deadline = self._clock.time() + RETURN_WAIT_S
        while self._waiting_rows() < target:
            left = deadline - self._clock.time()
            if left <= 0:
                return
            self._arrived.clear()
            if not await self._clock.wait(self._arrived, left):
                return

    def _waiting_rows(self) -> int:
        return sum(len(rows) for rows, future, _ in self._waiting if not future.done())

    def _take(self) -> list[Waiting]:
        """The waiting requests, oldest first, up to `max_rows` rows (at least one request), a request that goes
        alone by itself; those whose caller gave up (deadline, disconnect) are dropped here, before they cost
        anything."""
        taken: list[Waiting] = []
        count = 0
        while self._waiting:
            rows, future, alone = self._waiting[0]
            if not future.done() and taken and (alone or taken[0][2] or count + len(rows) > self._max_rows):
                break
            self._waiting.popleft()
            if future.done():
                self._dropped(rows)
            else:
                taken.append((rows, future, alone))
                count += len(rows)
        return taken

    async def _send_together(self, batch: list[Waiting]) -> None:
        try:
            outputs = await self._send([row for rows, _, _ in batch for row in rows])
        except BaseException as exc:  # every request of the call gets the call's error
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(exc) if isinstance(exc, Exception) else future.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        start = 0
        for rows, future, _ in batch:
            if not future.done():
                future.set_result(outputs[start : start + len(rows)])
            start += len(rows)
