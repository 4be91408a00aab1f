"""The infinity adapter (`gateway/wire/infinity.py`: /classify, the legacy media routes, infinity's /rerank
answer) over the real `Engine`, a fake model service and MiniLM's real tokenizer (`fake_engine.py`). The /rerank
bodies both families share: test_shared_rerank.py."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.wire import infinity
from gateway.wire.common import RerankRequest
from tests.unit.gateway.fake_engine import CLASSIFIER, CLIP, EMBEDDER, RERANKER, answer, assert_refused

BAD_CLASSIFIES = [
    pytest.param({"model": "no-such-model", "input": "x"}, 404, "model", id="unknown-model"),
    pytest.param({"model": RERANKER, "input": "x"}, 400, "model", id="reranker-cannot-classify"),
    pytest.param({"input": []}, 400, "input", id="empty-list"),
    pytest.param({"input": ["ok", ""]}, 400, "input", id="empty-string"),
    pytest.param({"input": ["x"] * 2049}, 400, "input", id="2049-inputs"),
    pytest.param({"input": [1, 2]}, 400, "input", id="token-ids-not-accepted"),
    pytest.param({"input": "x", "raw_scores": "yes"}, 400, "raw_scores", id="raw-scores-not-a-bool"),
]


@pytest.mark.parametrize(("body", "status", "param"), BAD_CLASSIFIES)
def test_bad_classify_bodies(serve, body, status, param):
    assert_refused(answer(serve, infinity.classify, infinity.ClassifyRequest, body), status, param)


@pytest.mark.parametrize("raw", [False, True])
def test_classify_answers_every_label_best_first(serve, raw):
    status, body, service = answer(
        serve, infinity.classify, infinity.ClassifyRequest, {"input": ["a fox", "a lazy dog"], "raw_scores": raw}
    )
    assert status == 200 and body["model"] == CLASSIFIER and len(service.rows) == 2
    first = body["data"][0]
    assert [item["label"] for item in first] == ["positive", "neutral", "negative"]
    scores = [item["score"] for item in first]
    assert np.isclose(sum(scores), 1) != raw  # softmax probabilities, or the logits themselves


def test_legacy_media_routes_need_a_media_model(serve):
    outcome = answer(serve, infinity.embed_images, infinity.LegacyMediaRequest, {"input": "x", "model": EMBEDDER})
    assert "not ['image']" in assert_refused(outcome, 400, "model")


def test_the_audio_route_needs_an_audio_model(serve):
    outcome = answer(serve, infinity.embed_audio, infinity.LegacyMediaRequest, {"input": "x", "model": CLIP})
    assert "not ['audio']" in assert_refused(outcome, 400, "model")


def test_rerank_answers_the_top_n_best_first_with_their_documents(serve):
    documents = ["a", "a much longer document", "a longer one"]
    body = {"query": "q", "documents": documents, "top_n": 2, "return_documents": True}
    status, ranked, service = answer(serve, infinity.rerank, RerankRequest, body)
    assert status == 200 and ranked["model"] == RERANKER and len(service.rows) == 3  # every document scored
    assert [(r["index"], r["document"]) for r in ranked["results"]] == [(1, documents[1]), (2, documents[2])]
    assert ranked["results"][0]["relevance_score"] > ranked["results"][1]["relevance_score"]
    status, bare, _ = answer(serve, infinity.rerank, RerankRequest, {"query": "q", "documents": documents})
    assert status == 200 and [r["index"] for r in bare["results"]] == [1, 2, 0]
    assert all(r.get("document") is None for r in bare["results"])
