"""POST /rerank, shared by infinity and TEI: the one rule that tells a TEI body from infinity's, and each family's
adapter handed its own fields alone. The answers through the engine: tests/unit/gateway/test_engine.py."""

from __future__ import annotations

import asyncio

import pytest

from config.errors import InvalidRequest
from gateway.wire import shared_rerank, tei
from gateway.wire.common import DocumentObject, RerankRequest


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
