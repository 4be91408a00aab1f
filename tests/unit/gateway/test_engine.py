"""The real `Engine` and the OpenAI and infinity adapters, with a fake model service and MiniLM's real tokenizer:
every bad body refused with its status and the field it names, before any row reaches a model service, and
good ones answered from the service's outputs. The real server keeps one smoke test per route family."""

from __future__ import annotations

import numpy as np
import pytest

from config.settings import EmbentoConfig
from gateway.queries import DecodeQuery, EmbedQuery, InputItem, RankQuery, TokenizeQuery
from gateway.wire import infinity, openai, shared_rerank
from tests.unit.gateway.fake_engine import (
    CLASSIFIER,
    CLIP,
    EMBEDDER,
    RERANKER,
    Passthrough,
    answer,
    assert_refused,
)

# OpenAI: every bad body the server's tests sent (tests/server/test_errors.py), answered by the engine alone
BAD_EMBEDDINGS = [
    pytest.param({"input": [], "model": EMBEDDER}, 400, "input", id="empty-list"),
    pytest.param({"input": "", "model": EMBEDDER}, 400, "input", id="empty-string"),
    pytest.param({"input": ["ok", ""], "model": EMBEDDER}, 400, "input", id="empty-string-in-list"),
    pytest.param({"input": [[]], "model": EMBEDDER}, 400, "input", id="empty-token-list"),
    pytest.param({"input": ["x"] * 2049, "model": EMBEDDER}, 400, "input", id="2049-inputs"),
    pytest.param({"input": [1.5, 2], "model": EMBEDDER}, 400, "input", id="float-items"),
    pytest.param({"input": ["a", 3], "model": EMBEDDER}, 400, "input", id="mixed-items"),
    pytest.param({"input": [True], "model": EMBEDDER}, 400, "input", id="bool-items"),
    pytest.param({"input": [{"txt": "a"}], "model": EMBEDDER}, 400, "input", id="unknown-object-items"),
    pytest.param({"input": [[["deep"]]], "model": EMBEDDER}, 400, "input", id="nested-garbage"),
    pytest.param({"input": None, "model": EMBEDDER}, 400, "input", id="null-input"),
    pytest.param({"model": EMBEDDER}, 400, "input", id="missing-input"),
    pytest.param({"input": "x", "model": "no-such-model"}, 404, "model", id="unknown-model"),
    pytest.param({"input": "x", "model": EMBEDDER, "dimensions": 0}, 400, "dimensions", id="dimensions-0"),
    pytest.param({"input": "x", "model": EMBEDDER, "dimensions": -3}, 400, "dimensions", id="dimensions-negative"),
    pytest.param({"input": "x", "model": EMBEDDER, "dimensions": 385}, 400, "dimensions", id="dimensions-too-large"),
    pytest.param({"input": "x", "model": EMBEDDER, "dimensions": "12"}, 400, "dimensions", id="dimensions-string"),
    pytest.param(
        {"input": "x", "model": EMBEDDER, "encoding_format": "float16"}, 400, "encoding_format", id="unknown-encoding"
    ),
    pytest.param({"input": [[101, 30522]], "model": EMBEDDER}, 400, "input", id="token-id-too-large"),
    pytest.param({"input": [[101, -1]], "model": EMBEDDER}, 400, "input", id="token-id-negative"),
    pytest.param({"input": "x", "model": EMBEDDER, "modality": "image"}, 400, "model", id="modality-image"),
    pytest.param({"input": "x", "model": EMBEDDER, "prompt_name": "nope"}, 400, "prompt_name", id="unknown-prompt"),
    pytest.param([1, 2, 3], 400, None, id="body-not-an-object"),
    # and the controls that apply to some kinds of model only
    pytest.param(
        {"input": "x", "model": EMBEDDER, "max_active_dims": 4},
        400,
        "max_active_dims",
        id="max-active-dims-on-a-dense-model",
    ),
    pytest.param({"input": "x", "model": EMBEDDER, "max_tokens": 0}, 400, "max_tokens", id="max-tokens-0"),
    pytest.param({"input": "x", "model": CLIP, "normalize": False}, 400, "normalize", id="normalize-off-for-clip"),
    pytest.param({"input": "x", "model": CLIP, "instruction": "find"}, 400, "instruction", id="instruction-for-clip"),
    pytest.param({"input": [[1, 2]], "model": CLIP}, 400, "input", id="token-ids-for-clip"),
    pytest.param(
        {"input": "x", "model": EMBEDDER, "instruction": "a", "prompt_name": "query"},
        400,
        "instruction",
        id="instruction-and-prompt",
    ),
    pytest.param({"input": "x", "model": CLASSIFIER}, 400, "model", id="a-classifier-cannot-embed"),
    pytest.param({"input": ["x"] * 65, "model": CLIP, "modality": "image"}, 400, "input", id="65-images"),
]


@pytest.mark.parametrize("body, status, param", BAD_EMBEDDINGS)
def test_bad_embedding_bodies(serve, body, status, param):
    assert_refused(answer(serve, openai.embed, openai.EmbeddingRequest, body), status, param)


def test_unknown_model_lists_served_names(serve):
    outcome = answer(serve, openai.embed, openai.EmbeddingRequest, {"input": "x", "model": "gpt-x"})
    message = assert_refused(outcome, 404, "model")
    assert EMBEDDER in message and outcome[1]["error"]["code"] == "model_not_found"


def test_a_too_long_text_names_its_index(serve):
    too_many = EmbentoConfig().max_item_chars + 1
    body = {"input": ["fine", "a" * too_many], "model": EMBEDDER}
    message = assert_refused(answer(serve, openai.embed, openai.EmbeddingRequest, body), 400, "input")
    assert message.startswith(f"input[1] has {too_many} characters")


def test_embeddings_answer_from_the_service_outputs(serve, tokenizers):
    status, body, service = answer(
        serve, openai.embed, openai.EmbeddingRequest, {"input": ["a fox", "a dog"], "model": EMBEDDER, "dimensions": 8}
    )
    assert status == 200 and [row.input_ids for row in service.rows] == tokenizers[EMBEDDER].encode_texts(
        ["a fox", "a dog"]
    )
    vectors = np.array([item["embedding"] for item in body["data"]])
    assert vectors.shape == (2, 8) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert body["usage"]["prompt_tokens"] == sum(row.length for row in service.rows)


def test_int8_codes_from_the_calibrated_scale(serve):
    status, body, _ = answer(
        serve, openai.embed, openai.EmbeddingRequest, {"input": "a fox", "model": EMBEDDER, "encoding_format": "int8"}
    )
    assert status == 200 and all(isinstance(code, int) and -128 <= code <= 127 for code in body["data"][0]["embedding"])


def test_a_route_without_room_for_the_shape_refuses_before_any_work(serve):
    query = EmbedQuery(items=(InputItem("text", "a"),), model=EMBEDDER, shapes=frozenset({"sparse"}))
    outcome = answer(serve, lambda engine, q: engine.embed(q), Passthrough, query)
    assert "which this route cannot answer" in assert_refused(outcome, 400, "model")


# infinity: the legacy media routes, /rerank with documents, /classify
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


def test_legacy_media_routes_need_a_media_model(serve):
    outcome = answer(serve, infinity.embed_images, infinity.LegacyMediaRequest, {"input": "x", "model": EMBEDDER})
    assert "not ['image']" in assert_refused(outcome, 400, "model")


# Tokenize and decode: through the engine, checked like the other text lists
def test_tokenize_and_decode(serve):
    tokens, _ = serve(lambda engine: engine.tokenize(TokenizeQuery(texts=("a fox",))))
    assert [t.text for t in tokens.tokens[0]] == ["[CLS]", "a", "fox", "[SEP]"]
    texts, _ = serve(lambda engine: engine.decode(DecodeQuery(ids=((101, 1037, 4419, 102),))))
    assert texts == ["a fox"]


@pytest.mark.parametrize(
    ("call", "param"),
    [
        (lambda engine: engine.tokenize(TokenizeQuery(texts=())), "inputs"),
        (
            lambda engine: engine.tokenize(
                TokenizeQuery(texts=("a", "")),
            ),
            "inputs",
        ),
        (lambda engine: engine.tokenize(TokenizeQuery(texts=("a",), model=CLIP)), "model"),
        (lambda engine: engine.decode(DecodeQuery(ids=())), "ids"),
        (lambda engine: engine.decode(DecodeQuery(ids=((1,),) * 2049)), "ids"),
    ],
)
def test_bad_tokenize_and_decode_queries(serve, call, param):
    outcome = answer(serve, lambda engine, _: call(engine), Passthrough, None)
    assert_refused(outcome, 400, param)


def test_rank_query_checks_the_instruction_length(serve):
    query = RankQuery(query="q", documents=("a",), instruction="i" * 200_001)
    outcome = answer(serve, lambda engine, q: engine.rank(q), Passthrough, query)
    assert_refused(outcome, 400, "instruction")
