"""Abandoned requests are not computed: past its deadline a request gets a 504, a client that disconnects
is let go, and in both cases the model service drops the request's rows that have not run yet."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator

import httpx
import pytest

from tests.conftest import MINILM, SAMPLE, metric, running_server

pytestmark = pytest.mark.server

TIMEOUT_S = 2
LONG = " ".join(["word"] * 1000)  # 256 tokens after truncation
# Passes of one input on one thread: the blocker's 128 passes of 256 tokens take 48 s here (0.38 s each) and
# over 4 s on the fastest core there is, so at its deadline most of them are still to run on any host. On the
# CPU, whatever the host has: a GPU launches every pass of a call at once (runners/pool.py).
BLOCKER_INPUTS, BLOCKER_PASS = 128, 1
LEAVERS, LEAVER_INPUTS = 8, 16
POLL_S = 0.02


@pytest.fixture(scope="module")
def short_deadline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = {
        "models": [{"model_id": MINILM, "device": "cpu", "batch_size": BLOCKER_PASS}],
        "request_timeout_s": TIMEOUT_S,
        "cpu_threads": 1,
        "gateway_workers": 1,
    }
    with running_server(tmp_path_factory.mktemp("deadline"), config) as (url, _):
        yield url


async def counts(http: httpx.AsyncClient) -> dict[str, float]:
    text = (await http.get("/metrics")).text
    queued = [
        float(sample["value"])
        for sample in SAMPLE.finditer(text)
        if sample["name"] == "embento_queued_items" and 'model_service="TextEmbedder"' in (sample["labels"] or "")
    ]
    return {
        "computed": metric(text, "embento_model_inputs_total", model=MINILM),
        "dropped": metric(text, "embento_dropped_inputs_total", model=MINILM),
        "passes": metric(text, "embento_model_forward_seconds_count", model=MINILM),
        "pass_seconds": metric(text, "embento_model_forward_seconds_sum", model=MINILM),
        "deadline": metric(text, "embento_abandoned_requests_total", model_service="TextEmbedder", reason="deadline"),
        "disconnect": metric(
            text, "embento_abandoned_requests_total", model_service="TextEmbedder", reason="disconnect"
        ),
        "queued": max(queued, default=0.0),  # inputs admitted and not yet answered
    }


async def wait_for(
    http: httpx.AsyncClient, reached: Callable[[dict[str, float]], bool], what: str, timeout_s: float = 60
) -> dict[str, float]:
    """The metrics once `reached` holds for them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = await counts(http)
        if reached(now):
            return now
        await asyncio.sleep(POLL_S)
    raise AssertionError(f"not reached in {timeout_s} s: {what}; metrics {now}")


async def leave(url: str, index: int) -> httpx.Response:
    """A client that waits for its answer until it is cancelled, then closes its connection."""
    body = {"model": MINILM, "input": [f"leaver {index} sentence {i}" for i in range(LEAVER_INPUTS)]}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        return await http.post("/v1/embeddings", json=body)


async def timed(request: Callable[[], Awaitable[httpx.Response]]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await request()
    return response, time.monotonic() - started


def test_past_the_deadline_and_after_a_disconnect_queued_work_is_dropped(short_deadline):
    asyncio.run(deadline_and_disconnect(short_deadline))


async def deadline_and_disconnect(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        before = await counts(http)
        body = {"model": MINILM, "input": [LONG] * BLOCKER_INPUTS}
        blocker = asyncio.create_task(timed(lambda: http.post("/v1/embeddings", json=body)))
        # The blocker is admitted, so its call is the one in flight: the leavers queue behind it.
        await wait_for(http, lambda now: now["queued"] >= BLOCKER_INPUTS, "the blocker admitted")
        leavers = [asyncio.create_task(leave(url, i)) for i in range(LEAVERS)]
        await wait_for(
            http, lambda now: now["queued"] >= BLOCKER_INPUTS + LEAVERS * LEAVER_INPUTS, "every leaver queued"
        )
        for leaver in leavers:  # the clients give up and disconnect
            leaver.cancel()
        assert all(
            isinstance(outcome, asyncio.CancelledError)
            for outcome in await asyncio.gather(*leavers, return_exceptions=True)
        )
        await wait_for(http, lambda now: now["disconnect"] - before["disconnect"] >= LEAVERS, "every leaver let go")
        assert not blocker.done(), "the leavers left only after the blocker's deadline"

        response, seconds = await blocker
        at_answer = await counts(http)
        sent = BLOCKER_INPUTS + LEAVERS * LEAVER_INPUTS
        # every row is either computed or dropped, once
        after = await wait_for(
            http,
            lambda now: now["computed"] + now["dropped"] - before["computed"] - before["dropped"] >= sent,
            "every row computed or dropped",
        )
        fresh = await http.post("/v1/embeddings", json={"model": MINILM, "input": ["still serving"]})

    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "timeout"
    delta = {key: after[key] - before[key] for key in after}
    assert delta["computed"] + delta["dropped"] == sent, delta
    assert delta["deadline"] == 1 and delta["disconnect"] == LEAVERS, delta
    # Answered at the deadline, not when the work would have ended (its passes at the pace they ran here).
    assert delta["passes"] > 0, delta
    work_s = BLOCKER_INPUTS / BLOCKER_PASS * delta["pass_seconds"] / delta["passes"]
    assert TIMEOUT_S <= seconds < work_s, (seconds, work_s)
    # The blocker had passes left at its deadline, and none of them ran but the one under way when the cancel
    # came and at most one begun before it arrived; no leaver's row ran: all the rest were dropped.
    assert delta["computed"] < BLOCKER_INPUTS, delta
    assert after["computed"] - at_answer["computed"] <= 2 * BLOCKER_PASS, (at_answer, after)
    assert fresh.status_code == 200 and len(fresh.json()["data"][0]["embedding"]) == 384
