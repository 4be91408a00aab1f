"""Concurrency: adaptive batching really merges requests, and many clients see no errors."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import httpx
import pytest

from tests.conftest import MINILM, TINY_MEAN, make_sentences

pytestmark = pytest.mark.server
BATCH_METRIC = re.compile(
    r'^bentoml_service_adaptive_batch_size_(count|bucket)\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$', re.M
)


def merged_batches(metrics: str) -> float:
    """How many TextEmbedder.embed batches carried more than one request (count minus the le=1 bucket)."""
    count = single = 0.0
    for match in BATCH_METRIC.finditer(metrics):
        labels = match["labels"]
        if 'method_name="embed"' not in labels:
            continue
        if match.group(1) == "count":
            count += float(match["value"])
        elif 'le="1.0"' in labels:
            single += float(match["value"])
    return count - single


async def _fire(url: str, clients: int, requests_each: int, bodies: list[dict]) -> Counter:
    statuses: Counter = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        async def one_client(index: int) -> None:
            for step in range(requests_each):
                body = bodies[(index + step) % len(bodies)]
                response = await http.post("/v1/embeddings", json=body)
                statuses[response.status_code] += 1

        await asyncio.gather(*(one_client(i) for i in range(clients)))
    return statuses


def test_concurrent_requests_are_batched(server, client):
    before = merged_batches(client.get("/metrics").text)
    bodies = [{"input": sentence, "model": MINILM} for sentence in make_sentences(32, seed=3)]
    statuses = asyncio.run(_fire(server, clients=32, requests_each=3, bodies=bodies))
    assert statuses == Counter({200: 96})
    after = merged_batches(client.get("/metrics").text)
    assert after > before, "no batch held more than one request"


def test_64_clients_see_no_errors(server):
    sentences = make_sentences(40, seed=11)
    bodies = [{"input": s, "model": MINILM} for s in sentences]
    bodies += [{"input": sentences[i:i + 3], "model": TINY_MEAN} for i in range(0, 30, 3)]
    statuses = asyncio.run(_fire(server, clients=64, requests_each=20, bodies=bodies))
    assert statuses == Counter({200: 64 * 20})
