"""POST /rerank, shared by infinity and TEI: the one rule that tells a TEI body from infinity's, and each family's
adapter handed its own fields alone; and bodies through the real `Engine` over a fake model service
(`fake_engine.py`): the bad ones refused before any row is sent, the good ones answered in each family's shape."""

from __future__ import annotations

import asyncio

import pytest

from config.errors import InvalidRequest
from gateway.wire import shared_rerank, tei
from gateway.wire.common import DocumentObject, RerankRequest
from tests.unit.gateway.fake_engine import CLASSIFIER, EMBEDDER, RERANKER, answer, assert_refused


def test_a_body_is_teis_by_texts_without_documents():
    body = shared_rerank.RerankBody(query="q", texts=["a", "b"], top_n=1, raw_scores=True, return_text=True)
    assert shared_rerank.is_tei_rerank(vars(body)) and shared_rerank.is_tei_rerank({"texts": ["a"]})
    assert not shared_rerank.is_tei_rerank({"documents": ["a"]})
    assert not shared_rerank.is_tei_rerank({"texts": ["a"], "documents": []})
    assert not shared_rerank.is_tei_rerank({"texts": None, "documents": None})


def test_each_family_gets_its_own_fields():
    shared = shared_rerank.RerankBody(
        query="q",
        texts=["a"],
        top_n=1,
        raw_scores=True,
        return_text=True,
        return_documents=True,
        truncation_direction="Left",
        instruction="find",
    )
    assert shared_rerank.family_body(tei.TeiRerankRequest, shared) == tei.TeiRerankRequest(
        query="q",
        texts=["a"],
        top_n=1,
        raw_scores=True,
        return_text=True,
        truncation_direction="left",
        instruction="find",
    )
    shared = shared_rerank.RerankBody(query="q", documents=["a", {"text": "b", "id": 3}], return_documents=True)
    infinity = shared_rerank.family_body(RerankRequest, shared)
    assert type(infinity) is RerankRequest and infinity.return_documents
    assert infinity.documents == ["a", DocumentObject(text="b", id=3)]


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (
            {"query": "q", "texts": ["a"], "documents": ["b"]},
            "texts",
            "give documents (infinity, Cohere) or texts (TEI), not both",
        ),
        ({"query": "q"}, "documents", "documents is required"),
    ],
)
def test_a_body_needs_texts_or_documents(body, param, message):
    with pytest.raises(InvalidRequest) as caught:  # refused before the engine is asked
        asyncio.run(shared_rerank.rerank(None, shared_rerank.RerankBody.model_validate(body)))  # type: ignore[arg-type]
    assert (caught.value.param, caught.value.message) == (param, message)


# Through the engine
BAD_RERANKS = [
    pytest.param({"query": " ".join(["long"] * 600), "documents": ["a"]}, 400, "query", id="query-too-long"),
    pytest.param({"query": "q", "documents": []}, 400, "documents", id="no-documents"),
    pytest.param({"query": "q", "documents": ["x"] * 2049}, 400, "documents", id="2049-documents"),
    pytest.param({"query": "q", "documents": [{"title": "no text"}]}, 400, "documents", id="object-without-text"),
    pytest.param({"query": "q", "documents": ["a"], "top_n": 0}, 400, "top_n", id="top-n-0"),
    pytest.param({"query": "q", "documents": ["a"], "top_n": -2}, 400, "top_n", id="top-n-negative"),
    pytest.param({"query": "", "documents": ["a"]}, 400, "query", id="empty-query"),
    pytest.param({"documents": ["a"]}, 400, "query", id="missing-query"),
    pytest.param({"model": EMBEDDER, "query": "q", "documents": ["a"]}, 400, "model", id="embedder-cannot-rerank"),
    pytest.param({"model": CLASSIFIER, "query": "q", "documents": ["a"]}, 400, "model", id="classifier-cannot-rerank"),
    pytest.param({"model": "no-such-model", "query": "q", "documents": ["a"]}, 404, "model", id="unknown-model"),
    pytest.param({"query": "q"}, 400, "documents", id="neither-documents-nor-texts"),
    pytest.param({"query": "q", "documents": ["a"], "texts": ["b"]}, 400, "texts", id="documents-and-texts"),
]


@pytest.mark.parametrize(("body", "status", "param"), BAD_RERANKS)
def test_bad_rerank_bodies(serve, body, status, param):
    message = assert_refused(answer(serve, shared_rerank.rerank, shared_rerank.RerankBody, body), status, param)
    if param == "model" and status == 400 and "model" in body:
        assert RERANKER in message  # says which models can


def test_rerank_answers_infinitys_shape_or_teis_by_the_body(serve):
    status, body, service = answer(
        serve,
        shared_rerank.rerank,
        shared_rerank.RerankBody,
        {"query": "q", "documents": ["a", "a longer one"], "return_documents": True},
    )
    assert status == 200 and body["model"] == RERANKER and len(service.rows) == 2
    assert [r["index"] for r in body["results"]] == [1, 0] and body["results"][0]["document"] == "a longer one"
    status, body, _ = answer(
        serve, shared_rerank.rerank, shared_rerank.RerankBody, {"query": "q", "texts": ["a", "a longer one"]}
    )
    assert status == 200 and [r["index"] for r in body] == [1, 0] and set(body[0]) == {"index", "score"}
