"""A model-service call that gets no answer in time is sent again, and the first answer is taken.

A model-service replica that stops answering (a hung process, a lost node) keeps the calls it was sent: its
connections stay open, and nothing fails until the request's deadline. Its Service (or load balancer) stops
sending it new work once its readiness probe fails, so a call sent again reaches a replica that answers.
When a call is overdue is learned from the service's own answers: `floor_s` past what its tokens took of late,
three times over; each later attempt waits twice as long as the one before, so a service that is only slow
gets few extra calls. Inference is idempotent: an answer from either attempt is the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
SLOWNESS = 3.0  # how many times its expected time a call may take before it counts as overdue
SMOOTHING = 0.2  # weight of the newest answer in the running seconds per token


class CallTimes:
    """Seconds per token one model service's answers took, as a running average: what a call should take."""

    def __init__(self) -> None:
        self.seconds_per_token: float | None = None

    def observe(self, tokens: int, seconds: float) -> None:
        rate = seconds / max(tokens, 1)
        old = self.seconds_per_token
        self.seconds_per_token = rate if old is None else old + SMOOTHING * (rate - old)

    def overdue_after(self, tokens: int, floor_s: float) -> float:
        """Seconds after which a call of `tokens` has taken too long: `floor_s` past its expected time, tripled."""
        expected = 0.0 if self.seconds_per_token is None else tokens * self.seconds_per_token
        return floor_s + SLOWNESS * expected


async def first_answer(send: Callable[[], Awaitable[T]], overdue_s: float, on_resend: Callable[[int], None]) -> T:
    """`send()` once, and again each time no attempt has answered in `overdue_s` (doubled after each resend;
    `on_resend` gets the number of attempts waiting); the first answer wins and the other attempts are
    cancelled. An attempt that fails leaves the others to answer; when all have failed, the last failure is
    raised. The caller's deadline, if any, bounds it all."""
    attempts: set[asyncio.Future[T]] = {asyncio.ensure_future(send())}
    wait_s: float = overdue_s
    failure: BaseException | None = None
    try:
        while True:
            done, attempts = await asyncio.wait(attempts, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
            for attempt in done:
                if attempt.exception() is None:
                    return attempt.result()
                failure = attempt.exception()
            if not done:  # overdue: one more attempt, and a longer wait for the next
                on_resend(len(attempts))
                attempts.add(asyncio.ensure_future(send()))
                wait_s *= 2
            elif not attempts:
                assert failure is not None
                raise failure
    finally:
        for attempt in attempts:
            attempt.cancel()
