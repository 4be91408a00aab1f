"""Overload: 200 clients against a small queue get quick 429s with Retry-After in OpenAI's shape, never a
5xx, and every request that was admitted gets its correct answer."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from testkit.sentences import make_sentences
from tests.conftest import MINILM, metric, running_server

pytestmark = pytest.mark.server

CLIENTS = 200
PER_REQUEST = 4
MAX_QUEUED_ITEMS = 16
MAX_CONCURRENT_REQUESTS = 64
MAX_REQUEST_TOKENS = 2000  # above any 4-sentence request of the storm
SERVICE = {"model_service": "TextEmbedder"}


@pytest.fixture(scope="module")
def small_queue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = {
        "models": [{"model_id": MINILM}],
        "max_queued_items": MAX_QUEUED_ITEMS,
        "max_concurrent_requests": MAX_CONCURRENT_REQUESTS,
        "max_request_tokens": MAX_REQUEST_TOKENS,
    }
    with running_server(tmp_path_factory.mktemp("small-queue"), config) as (url, _):
        yield url


def test_overload_is_a_quick_429_and_admitted_work_is_right(small_queue, minilm_path):
    from sentence_transformers import SentenceTransformer

    sentences = make_sentences(CLIENTS * PER_REQUEST, seed=11)
    bodies = [sentences[i * PER_REQUEST : (i + 1) * PER_REQUEST] for i in range(CLIENTS)]

    async def storm() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=small_queue, timeout=120, limits=limits) as http:
            return await asyncio.gather(
                *(http.post("/v1/embeddings", json={"input": body, "model": MINILM}) for body in bodies)
            )

    before = httpx.get(f"{small_queue}/metrics", timeout=30).text
    responses = asyncio.run(storm())
    statuses = Counter(response.status_code for response in responses)
    assert set(statuses) == {200, 429}, statuses
    # A queue of 16 inputs holds 4 requests of 4, the one in flight included: each request admitted left in
    # exactly one model-service call, and no call carried more than 4 (however fast the model answers).
    after = httpx.get(f"{small_queue}/metrics", timeout=30).text
    per_call = {
        name: metric(after, f"embento_requests_per_call_{name}", **SERVICE)
        - metric(before, f"embento_requests_per_call_{name}", **SERVICE)
        for name in ("count", "sum")
    }
    within = metric(after, "embento_requests_per_call_bucket", le="4.0", **SERVICE) - metric(
        before, "embento_requests_per_call_bucket", le="4.0", **SERVICE
    )
    assert per_call["sum"] == statuses[200] and within == per_call["count"], (per_call, within, statuses)
    for response in responses:
        if response.status_code == 429:
            assert response.headers["retry-after"] == "1"
            error = response.json()["error"]
            assert (error["type"], error["code"]) == ("rate_limit_error", "overloaded")
            assert "queue is full" in error["message"] or "requests are in flight" in error["message"]
    model = SentenceTransformer(str(minilm_path), device="cpu")
    admitted = [(body, r) for body, r in zip(bodies, responses) if r.status_code == 200]
    expected = model.encode([s for body, _ in admitted for s in body])
    got = np.array([item["embedding"] for _, r in admitted for item in r.json()["data"]])
    cosines = (got * expected).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    assert cosines.min() >= 0.9999
    assert httpx.get(f"{small_queue}/health", timeout=30).status_code == 200
    metrics = httpx.get(f"{small_queue}/metrics", timeout=30).text
    rejected = re.findall(r'embento_rejected_requests_total\{[^}]*reason="(\w+)"[^}]*\} (\S+)', metrics)
    assert {reason for reason, _ in rejected} <= {"queue_full", "concurrency"}
    assert sum(float(count) for _, count in rejected) == statuses[429]
    queued = re.search(r"embento_queued_items\{[^}]*\} (\S+)", metrics)
    assert queued and float(queued.group(1)) == 0  # everything admitted was answered and released


def test_tokens_per_request_are_bounded_after_truncation(small_queue):
    long_text = " ".join(["word"] * 1000)  # truncated to MiniLM's 256 tokens
    fits = httpx.post(f"{small_queue}/v1/embeddings", json={"input": [long_text] * 7, "model": MINILM}, timeout=60)
    assert fits.status_code == 200 and fits.json()["usage"]["prompt_tokens"] == 7 * 256
    refused = httpx.post(f"{small_queue}/v1/embeddings", json={"input": [long_text] * 8, "model": MINILM}, timeout=60)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] is None  # the whole request, not one field
    assert f"2048 tokens after truncation; at most {MAX_REQUEST_TOKENS}" in error["message"]
    info = httpx.get(f"{small_queue}/info", timeout=10).json()
    assert info["limits"]["max_request_tokens"] == MAX_REQUEST_TOKENS
