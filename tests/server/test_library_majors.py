"""A server serving checkpoints saved by each library major (issue 48): a Qwen3 embedder saved by
transformers 4 + sentence-transformers 5 and the same weights saved by 5 + 6, and a CrossEncoder saved by
sentence-transformers 5, each answering what its saving libraries answer (`backend: auto`, so on ONNX Runtime
where the export matches torch)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.majors_reference import PAIRS, TEXTS
from tests.servers import MAJORS, SharedServer
from tests.tolerance import assert_close, assert_same_vectors

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def client(text_families_server: SharedServer) -> Iterator[httpx.Client]:
    """The three by the names in MAJORS, beside other text checkpoints (tests/servers.py)."""
    with httpx.Client(base_url=text_families_server.url, timeout=120) as http:
        yield http


def _vectors(client: httpx.Client, model: str) -> np.ndarray:
    response = client.post("/v1/embeddings", json={"model": model, "input": TEXTS})
    assert response.status_code == 200, response.text
    return np.array([item["embedding"] for item in response.json()["data"]])


def test_each_majors_embedder_answers_its_own_vectors(client, majors):
    assert_same_vectors(_vectors(client, "qwen3-st5"), majors.qwen3_st5_vectors)
    assert_same_vectors(_vectors(client, "qwen3-st6"), majors.qwen3_st6_vectors)


def test_a_sentence_transformers_5_cross_encoder_answers_its_own_logits(client, majors):
    query = PAIRS[0][0]
    assert all(pair[0] == query for pair in PAIRS)
    documents = [document for _, document in PAIRS]
    response = client.post(
        "/v1/rerank", json={"model": "reranker-st5", "query": query, "documents": documents, "raw_scores": True}
    )
    assert response.status_code == 200, response.text
    scores = {result["index"]: result["relevance_score"] for result in response.json()["results"]}
    assert_close([scores[i] for i in range(len(documents))], majors.reranker_st5_logits)


def test_each_runs_on_onnx_runtime_with_its_export_matching_torch(client):
    cards = {card["id"]: card for card in client.get("/v1/models").json()["data"]}
    assert set(MAJORS) <= set(cards)
    for card in (cards[name] for name in MAJORS):
        assert card["backend"] == "onnx" and card["backend_reason"].startswith("onnx: its export matches torch"), card
