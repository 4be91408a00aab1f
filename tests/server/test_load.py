"""Concurrency: adaptive batching really merges requests, and many clients see no errors."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from testkit.sentences import make_sentences
from tests.conftest import MINILM, TINY_MEAN, TINY_RERANKER, merged_batches

pytestmark = pytest.mark.server


async def _fire(
    url: str, clients: int, requests_each: int, bodies: list[dict], path: str = "/v1/embeddings"
) -> Counter:
    statuses: Counter = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:

        async def one_client(index: int) -> None:
            for step in range(requests_each):
                body = bodies[(index + step) % len(bodies)]
                response = await http.post(path, json=body)
                statuses[response.status_code] += 1

        await asyncio.gather(*(one_client(i) for i in range(clients)))
    return statuses


def test_concurrent_requests_are_batched(server, client):
    before = merged_batches(client.get("/metrics").text, "TextEmbedder")
    bodies = [{"input": sentence, "model": MINILM} for sentence in make_sentences(32, seed=3)]
    statuses = asyncio.run(_fire(server, clients=32, requests_each=3, bodies=bodies))
    assert statuses == Counter({200: 96})
    after = merged_batches(client.get("/metrics").text, "TextEmbedder")
    assert after > before, "no batch held more than one request"


def test_64_clients_see_no_errors(server):
    sentences = make_sentences(40, seed=11)
    bodies = [{"input": s, "model": MINILM} for s in sentences]
    bodies += [{"input": sentences[i : i + 3], "model": TINY_MEAN} for i in range(0, 30, 3)]
    statuses = asyncio.run(_fire(server, clients=64, requests_each=10, bodies=bodies))
    assert statuses == Counter({200: 64 * 10})


def test_32_rerank_clients_with_20_documents_each(server, client):
    documents = make_sentences(60, seed=13)
    bodies = [
        {"model": TINY_RERANKER, "query": f"question number {i}", "documents": documents[i : i + 20]} for i in range(40)
    ]
    before = merged_batches(client.get("/metrics").text, "Reranker")
    statuses = asyncio.run(_fire(server, clients=32, requests_each=3, bodies=bodies, path="/v1/rerank"))
    assert statuses == Counter({200: 96})
    assert merged_batches(client.get("/metrics").text, "Reranker") > before, "no rerank batch held two requests"
