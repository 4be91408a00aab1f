"""A model-service call with no answer in time is sent again, and the first answer wins (gateway/queue/resend.py).
The attempts here answer, fail or never answer by design, so no outcome depends on how fast the machine is."""

from __future__ import annotations

import asyncio

import pytest

from gateway.queue.resend import SLOWNESS, CallTimes, first_answer

OVERDUE_S = 0.01  # short: the attempts that matter never answer, whatever the wait


class Attempts:
    """Each call of `send` plays the next scripted outcome: "hang" (never answers), "fail", or an answer."""

    def __init__(self, *outcomes: str) -> None:
        self.outcomes = list(outcomes)
        self.sent = 0
        self.cancelled = 0
        self.resends: list[int] = []
        self.resent = asyncio.Event()  # set once a second attempt has gone out

    async def send(self) -> str:
        outcome = self.outcomes[self.sent]
        self.sent += 1
        if self.sent == 2:
            self.resent.set()
        if outcome == "hang":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if outcome == "fail":
            raise ConnectionError(f"attempt {self.sent} failed")
        return outcome


def test_an_answer_in_time_is_sent_once():
    attempts = Attempts("answer")
    assert asyncio.run(first_answer(attempts.send, 60.0, attempts.resends.append)) == "answer"
    assert (attempts.sent, attempts.resends) == (1, [])


def test_an_overdue_call_is_sent_again_and_the_silent_attempt_cancelled():
    attempts = Attempts("hang", "answer")
    assert asyncio.run(first_answer(attempts.send, OVERDUE_S, attempts.resends.append)) == "answer"
    assert (attempts.sent, attempts.resends, attempts.cancelled) == (2, [1], 1)


def test_a_failed_attempt_leaves_the_others_to_answer():
    attempts = Attempts("hang", "fail", "answer")
    assert asyncio.run(first_answer(attempts.send, OVERDUE_S, attempts.resends.append)) == "answer"
    assert attempts.sent == 3 and attempts.cancelled == 1


def test_when_every_attempt_failed_the_failure_is_raised():
    attempts = Attempts("fail")
    with pytest.raises(ConnectionError, match="attempt 1"):
        asyncio.run(first_answer(attempts.send, OVERDUE_S, attempts.resends.append))
    assert attempts.sent == 1


def test_the_callers_deadline_cancels_every_attempt():
    attempts = Attempts(*["hang"] * 20)

    async def with_deadline() -> None:
        task = asyncio.ensure_future(first_answer(attempts.send, OVERDUE_S, attempts.resends.append))
        await attempts.resent.wait()  # overdue once at least
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(with_deadline())
    assert attempts.cancelled == attempts.sent >= 2


def test_a_call_is_overdue_past_the_floor_and_three_times_what_its_tokens_took():
    times = CallTimes()
    assert times.overdue_after(1000, 10.0) == 10.0  # nothing learned yet: the floor
    times.observe(1000, 2.0)  # 2 ms a token
    assert times.overdue_after(500, 10.0) == pytest.approx(10.0 + SLOWNESS * 1.0)
    times.observe(1000, 4.0)  # slower: the average moves a fifth of the way
    assert times.seconds_per_token == pytest.approx(0.002 + 0.2 * 0.002)
