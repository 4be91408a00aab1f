"""Abandoned requests are not computed: past its deadline a request gets a 504, a client that disconnects
is let go, and in both cases the model service drops the request's rows that have not run yet."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import MINILM, metric, running_server

pytestmark = pytest.mark.server

TIMEOUT_S = 1
LONG = " ".join(["word"] * 1000)  # 256 tokens after truncation
# One model-service call (128 rows at most) of 32 passes of 4, two at a time (one per core): about 3 s of
# work here, 0.2 s a pass, so that on any machine of this kind passes are still to run at the deadline.
# (Passes of 32 ran in 1.5 s each here, and a host this fast had started the last of them before 2 s.)
BLOCKER_INPUTS, BLOCKER_PASS = 128, 4
LEAVERS, LEAVER_INPUTS = 8, 16


@pytest.fixture(scope="module")
def short_deadline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = {"models": [{"model_id": MINILM, "batch_size": BLOCKER_PASS}], "request_timeout_s": TIMEOUT_S}
    with running_server(tmp_path_factory.mktemp("deadline"), config) as (url, _):
        yield url


def counts(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        "computed": metric(text, "embento_model_inputs_total", model=MINILM),
        "dropped": metric(text, "embento_dropped_inputs_total", model=MINILM),
        "deadline": metric(text, "embento_abandoned_requests_total", model_service="TextEmbedder", reason="deadline"),
        "disconnect": metric(text, "embento_abandoned_requests_total", model_service="TextEmbedder",
                             reason="disconnect"),
    }


def leave_early(url: str, index: int) -> None:
    """A client that gives up after half a second and closes its connection."""
    body = {"model": MINILM, "input": [f"leaver {index} sentence {i}" for i in range(LEAVER_INPUTS)]}
    with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=httpx.Timeout(0.5)) as http:
        http.post(f"{url}/v1/embeddings", json=body)


def test_past_the_deadline_and_after_a_disconnect_queued_work_is_dropped(short_deadline):
    url = short_deadline
    before = counts(url)
    outcome: dict[str, httpx.Response | float] = {}

    def blocker() -> None:
        started = time.monotonic()
        body = {"model": MINILM, "input": [LONG] * BLOCKER_INPUTS}
        outcome["response"] = httpx.post(f"{url}/v1/embeddings", json=body, timeout=60)
        outcome["seconds"] = time.monotonic() - started

    running = threading.Thread(target=blocker)
    running.start()
    time.sleep(0.3)  # the blocker's batch is running; the leavers queue behind it
    leavers = [threading.Thread(target=leave_early, args=(url, i)) for i in range(LEAVERS)]
    for thread in leavers:
        thread.start()
    for thread in [running, *leavers]:
        thread.join()

    response = outcome["response"]
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "timeout"
    assert outcome["seconds"] < TIMEOUT_S + 2  # answered at the deadline, not when the work would have ended

    sent = BLOCKER_INPUTS + LEAVERS * LEAVER_INPUTS
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every row is either computed or dropped, once
        after = counts(url)
        if after["computed"] + after["dropped"] - before["computed"] - before["dropped"] >= sent:
            break
        time.sleep(0.5)
    delta = {key: after[key] - before[key] for key in after}
    assert delta["computed"] + delta["dropped"] == sent, delta
    assert delta["deadline"] == 1 and delta["disconnect"] == LEAVERS, delta
    # Every leaver's rows were queued behind the blocker's batch when their clients left, and the blocker's
    # passes after its deadline were not run either.
    assert delta["dropped"] >= LEAVERS * LEAVER_INPUTS + 32, delta

    fresh = httpx.post(f"{url}/v1/embeddings", json={"model": MINILM, "input": ["still serving"]}, timeout=30)
    assert fresh.status_code == 200 and len(fresh.json()["data"][0]["embedding"]) == 384
