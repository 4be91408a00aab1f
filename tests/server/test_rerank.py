"""Rerank through the running server: every client's native shape, scores equal to sentence-transformers'
CrossEncoder on the same checkpoint, and bad requests answered in OpenAI's error shape."""

from __future__ import annotations

import numpy as np
import pytest

from testkit.sentences import make_sentences
from tests.asserts import assert_healthy, assert_openai_error
from tests.conftest import MINILM, MINILM_RERANKER, TINY_RERANKER
from tests.tolerance import assert_close

pytestmark = pytest.mark.server
QUERY = "how do platform teams keep embeddings private"
DOCUMENTS = make_sentences(12, seed=21)[:10]  # short ones: nothing is truncated


@pytest.fixture(scope="module")
def cross_encoder(tiny_reranker_path):
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(tiny_reranker_path), local_files_only=True, device="cpu")


def _scores_by_index(results: list[dict]) -> np.ndarray:
    scores = np.zeros(len(results))
    for result in results:
        scores[result["index"]] = result["relevance_score"]
    return scores


@pytest.mark.parametrize("raw", [False, True])
def test_scores_match_cross_encoder_predict(client, cross_encoder, raw):
    response = client.post(
        "/v1/rerank", json={"model": TINY_RERANKER, "query": QUERY, "documents": DOCUMENTS, "raw_scores": raw}
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCUMENTS)))
    pairs = [(QUERY, document) for document in DOCUMENTS]
    expected = cross_encoder.predict(pairs, activation_fn=(lambda x: x) if raw else None)
    assert_close(_scores_by_index(results), expected)
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)


def test_a_reranker_saved_from_minilm_serves_and_scores_as_cross_encoder_predicts(client, minilm_reranker_path):
    """Its tokenizer.json (MiniLM's) pads and truncates every text to 128 tokens: such a reranker counted every
    query as 128 tokens, refused every request and never became ready. One document runs past the limit."""
    from sentence_transformers import CrossEncoder

    documents = DOCUMENTS + [" ".join(["private embeddings on our own machines"] * 40)]
    response = client.post("/v1/rerank", json={"model": MINILM_RERANKER, "query": QUERY, "documents": documents})
    assert response.status_code == 200, response.text
    reference = CrossEncoder(str(minilm_reranker_path), local_files_only=True, device="cpu")
    assert reference.max_seq_length == 128
    assert_close(_scores_by_index(response.json()["results"]), reference.predict([(QUERY, d) for d in documents]))


def test_cohere_v1_sdk(server, cross_encoder):
    import cohere

    co = cohere.Client(base_url=server, api_key="unused")
    response = co.rerank(model=TINY_RERANKER, query=QUERY, documents=DOCUMENTS, top_n=3, return_documents=True)
    expected = cross_encoder.predict([(QUERY, document) for document in DOCUMENTS])
    best = np.argsort(-expected, kind="stable")[:3].tolist()
    assert [r.index for r in response.results] == best
    assert [r.document.text for r in response.results] == [DOCUMENTS[i] for i in best]
    assert_close([r.relevance_score for r in response.results], expected[best])
    assert response.id and response.meta.api_version.version == "1"


def test_cohere_v2_sdk(server, cross_encoder):
    import cohere

    co = cohere.ClientV2(base_url=server, api_key="unused")
    response = co.rerank(model=TINY_RERANKER, query=QUERY, documents=DOCUMENTS, top_n=4)
    expected = cross_encoder.predict([(QUERY, document) for document in DOCUMENTS])
    assert [r.index for r in response.results] == np.argsort(-expected, kind="stable")[:4].tolist()
    assert all(getattr(r, "document", None) is None for r in response.results)
    assert response.meta.api_version.version == "2" and response.meta.billed_units.input_tokens > 0


def test_infinity_request_gets_infinity_response(client):
    body = {
        "model": TINY_RERANKER,
        "query": QUERY,
        "documents": DOCUMENTS[:4],
        "return_documents": True,
        "raw_scores": False,
        "top_n": 2,
    }
    response = client.post("/rerank", json=body).json()
    assert set(response) == {"object", "results", "model", "usage", "id", "created"}
    assert response["object"] == "rerank" and response["model"] == TINY_RERANKER
    assert len(response["results"]) == 2
    for result in response["results"]:
        assert set(result) == {"relevance_score", "index", "document"}
        assert result["document"] == DOCUMENTS[result["index"]]  # a plain string, as infinity returns it
    plain = client.post("/rerank", json={**body, "return_documents": False}).json()
    assert all(r["document"] is None for r in plain["results"])


def test_jina_style_document_objects_and_usage(client, tiny_reranker_path):
    from transformers import AutoTokenizer

    documents = [{"text": d, "id": i} for i, d in enumerate(DOCUMENTS[:3])]
    response = client.post(
        "/v1/rerank", json={"model": TINY_RERANKER, "query": QUERY, "documents": documents, "return_documents": True}
    ).json()
    assert {r["document"]["text"] for r in response["results"]} == set(DOCUMENTS[:3])
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_reranker_path))
    tokens = sum(len(tokenizer(QUERY, d)["input_ids"]) for d in DOCUMENTS[:3])
    assert response["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert all(
        "document" not in r
        for r in client.post(
            "/v1/rerank", json={"model": TINY_RERANKER, "query": QUERY, "documents": DOCUMENTS[:3]}
        ).json()["results"]
    )


def test_top_n_larger_than_the_list_and_the_default_model(client):
    response = client.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS[:3], "top_n": 50}).json()
    assert response["model"] == TINY_RERANKER and len(response["results"]) == 3


def test_long_documents_are_truncated_not_refused(client, tiny_reranker_path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    long_document = " ".join(["private embeddings on our own machines"] * 300)
    response = client.post(
        "/v1/rerank",
        json={"model": TINY_RERANKER, "query": QUERY, "documents": [long_document, "short"], "raw_scores": True},
    )
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] < 512 + 20
    features = AutoTokenizer.from_pretrained(str(tiny_reranker_path))(
        QUERY, long_document, truncation="only_second", max_length=512, return_tensors="pt"
    )
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_reranker_path)).eval()
    with torch.inference_mode():
        expected = model(**features).logits[0, 0].item()
    assert_close(_scores_by_index(response.json()["results"])[0], expected)


# Every refusal, with the field it names, is tests/unit/gateway/wire's (test_shared_rerank.py
# BAD_RERANKS, and Cohere's v2 in test_cohere.py), through the engine; here one the framework makes and one
# the engine makes, in OpenAI's shape.
@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"documents": ["a"]}, "query", id="missing-query"),
        pytest.param({"model": MINILM, "query": QUERY, "documents": ["a"]}, "model", id="embedder-cannot-rerank"),
    ],
)
def test_bad_rerank_requests(client, body, param):
    error = assert_openai_error(client.post("/v1/rerank", json=body), 400, param)
    if param == "model":
        assert TINY_RERANKER in error["message"]  # says which models can
    assert_healthy(client)
