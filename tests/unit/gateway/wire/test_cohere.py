"""Cohere's adapter without a server: each body's query, each answer written from a hand-built result, and
through the real engine over a fake model service (`tests/unit/gateway/fake_engine.py`) every bad body the
server's tests sent, refused with its status and the field it names before any row reaches a model service."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from config.errors import InvalidRequest
from gateway.queries import EmbedQuery, InputItem, RankQuery, mixed_input
from gateway.results import Embeddings, Ranking
from gateway.wire import cohere
from gateway.wire.common import rank_query
from models.base import ModelInfo, Truncation
from tests.unit.gateway.fake_engine import (
    CLASSIFIER,
    CLIP,
    COLPALI,
    EMBEDDER,
    RERANKER,
    SPLADE,
    answer,
    assert_refused,
)

IMAGE = "data:image/png;base64,iVBORw0KGgo="


def info(name: str = "m", kind: str = "embed", dimension: int = 4, normalized: bool = True) -> ModelInfo:
    return ModelInfo(
        served_model_name=name,
        model_id=name,
        kind=kind,  # type: ignore[arg-type]
        modalities=["text"],
        backend="torch",
        dimension=dimension,
        max_input_tokens=16,
        normalized=normalized,
        device="cpu",
        dtype="float32",
    )


def v1(**body) -> EmbedQuery:
    return cohere.embed_query(cohere.CohereEmbedRequest.model_validate(body))


def v2(**body) -> EmbedQuery:
    return cohere.embed_v2_query(cohere.CohereV2EmbedRequest.model_validate({"model": "m", **body}))


# Body -> query
def test_v1_texts_become_text_items_with_cohere_defaults():
    query = v1(texts=["a", "b"], model="m", input_type="search_query")
    assert query == EmbedQuery(
        items=(InputItem("text", "a"), InputItem("text", "b")),
        model="m",
        input_type="search_query",
        output_types=("float",),
        output_param="embedding_types",
        shapes=frozenset({"dense"}),
        items_param="texts",
        dimensions_param="output_dimension",
        truncation=Truncation(True, "right"),
    )


def test_v1_images_and_repeated_types():
    query = v1(images=[IMAGE], embedding_types=["int8", "float", "int8"])
    assert query.items == (InputItem("image", IMAGE),) and query.output_types == ("int8", "float")


@pytest.mark.parametrize(
    ("truncate", "expected"),
    [
        (None, Truncation(True, "right")),
        ("END", Truncation(True, "right")),
        ("START", Truncation(True, "left")),
        ("NONE", Truncation(False, "right")),
    ],
)
def test_truncate_onto_truncation(truncate, expected):
    assert v1(texts=["a"], truncate=truncate).truncation == expected


def test_v2_dimensions_max_tokens_and_content_inputs():
    query = v2(
        output_dimension=128,
        max_tokens=3,
        truncate="NONE",
        priority=2,
        inputs=[
            {"content": [{"type": "text", "text": "a red square"}]},
            {"content": [{"type": "image_url", "image_url": {"url": IMAGE}}]},
            {"content": [{"type": "image_url", "image_url": IMAGE}]},
        ],
    )
    assert query.items == (InputItem("text", "a red square"), InputItem("image", IMAGE), InputItem("image", IMAGE))
    assert query.dimensions == 128 and query.truncation == Truncation(False, "right", max_tokens=3)


def test_v2_an_input_of_several_parts_is_one_mixed_input_in_the_clients_order():
    content = [
        {"type": "text", "text": "a red square"},
        {"type": "image_url", "image_url": {"url": IMAGE}},
        {"type": "text", "text": "and its caption"},
    ]
    query = v2(inputs=[{"content": content}, {"content": [{"type": "text", "text": "alone"}]}])
    parts = (InputItem("text", "a red square"), InputItem("image", IMAGE), InputItem("text", "and its caption"))
    assert query.items == (mixed_input(parts), InputItem("text", "alone"))
    assert query.items[0].parts == parts and query.items[0].modality == "text"


def test_v2_texts_as_in_v1():
    assert v2(texts=["a"]).items == (InputItem("text", "a"),)


# Bodies the adapter refuses, with its messages
@pytest.mark.parametrize(
    ("query", "body", "param", "message"),
    [
        (v1, {}, "texts", "give exactly one of texts or images; got none"),
        (
            v1,
            {"texts": ["a"], "images": [IMAGE]},
            "images",
            "give exactly one of texts or images; got ['texts', 'images']",
        ),
        (v2, {}, "texts", "give exactly one of texts, images or inputs; got none"),
        (
            v2,
            {"texts": ["a"], "inputs": [{"content": [{"type": "text", "text": "a"}]}]},
            "inputs",
            "give exactly one of texts, images or inputs",
        ),
        (v2, {"inputs": [{"content": []}]}, "inputs", "inputs[0] has no content parts"),
        (v1, {"texts": ["a"], "embedding_types": []}, "embedding_types", "embedding_types must not be empty"),
    ],
)
def test_bad_bodies_are_refused_by_the_adapter(query, body, param, message):
    with pytest.raises(InvalidRequest) as caught:
        query(**body)
    assert caught.value.param == param and caught.value.message.startswith(message)


def test_the_inputs_are_refused_before_the_types():
    with pytest.raises(InvalidRequest, match="give exactly one"):
        v1(embedding_types=[])


# Result -> answer
def embeddings(query: EmbedQuery, vectors: list[list[float]], tokens: int = 7) -> Embeddings:
    return Embeddings(
        query, info(dimension=len(vectors[0])), [np.asarray(v, dtype=np.float32) for v in vectors], tokens
    )


def test_v1_answer_without_types_is_floats():
    answer = cohere.embed_v1_answer(embeddings(v1(texts=["a", "b"]), [[0.6, 0.8], [1.0, 0.0]]), by_type=False)
    assert list(answer) == ["response_type", "embeddings", "id", "texts", "meta"]
    assert answer["response_type"] == "embeddings_floats" and answer["texts"] == ["a", "b"]
    assert np.allclose(answer["embeddings"], [[0.6, 0.8], [1.0, 0.0]]) and answer["id"].startswith("embento-")
    assert answer["meta"] == {
        "api_version": {"version": "1"},
        "billed_units": {"input_tokens": 7, "output_tokens": 0},
        "tokens": {"input_tokens": 7, "output_tokens": 0},
    }


def test_v1_answer_by_type_in_the_asked_order():
    query = v1(texts=["a"], embedding_types=["binary", "base64", "float"])
    answer = cohere.embed_v1_answer(embeddings(query, [[0.6, -0.8] * 4]), by_type=True)
    assert answer["response_type"] == "embeddings_by_type"
    assert list(answer["embeddings"]) == ["binary", "base64", "float"]
    assert answer["embeddings"]["binary"] == [[42]]  # sign bits 10101010 (170), offset by 128
    floats = np.frombuffer(base64.b64decode(answer["embeddings"]["base64"][0]), dtype="<f4")
    assert np.allclose(floats, answer["embeddings"]["float"][0])


def test_v2_answer_counts_images_and_lists_only_texts():
    query = v2(
        inputs=[{"content": [{"type": "text", "text": "a"}]}, {"content": [{"type": "image_url", "image_url": IMAGE}]}]
    )
    answer = cohere.embed_v2_answer(embeddings(query, [[1.0, 0.0], [0.0, 1.0]], tokens=5))
    assert list(answer) == ["response_type", "id", "embeddings", "texts", "meta"]
    assert answer["texts"] == ["a"] and list(answer["embeddings"]) == ["float"]
    assert answer["meta"]["billed_units"] == {"input_tokens": 5, "output_tokens": 0, "images": 1}
    assert answer["meta"]["api_version"] == {"version": "2"}


def test_v2_answer_lists_the_text_parts_and_counts_the_images_of_mixed_inputs():
    content = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": IMAGE}, {"type": "text", "text": "b"}]
    query = v2(inputs=[{"content": content}, {"content": [{"type": "text", "text": "c"}]}])
    answer = cohere.embed_v2_answer(embeddings(query, [[1.0, 0.0], [0.0, 1.0]], tokens=7))
    assert answer["texts"] == ["a", "b", "c"] and answer["meta"]["billed_units"]["images"] == 1


def test_v2_answer_cuts_to_the_output_dimension_and_renormalizes():
    answer = cohere.embed_v2_answer(embeddings(v2(texts=["a"], output_dimension=2), [[0.3, 0.4, 0.5, 0.7]]))
    assert np.allclose(answer["embeddings"]["float"], [[0.6, 0.8]])


def ranking(**query) -> Ranking:
    rank_query = RankQuery(query="q", documents=("d0", "d1", "d2"), **query)
    return Ranking(rank_query, info("r", kind="rerank", dimension=1), order=[2, 0], scores=[0.5, 0.1, 0.9], tokens=11)


def test_rerank_v1_answer_with_and_without_documents_and_jinas_fields():
    answer = cohere.rerank_v1_answer(ranking(), return_documents=True).model_dump(exclude_none=True)
    assert answer["results"] == [
        {"index": 2, "relevance_score": 0.9, "document": {"text": "d2"}},
        {"index": 0, "relevance_score": 0.5, "document": {"text": "d0"}},
    ]
    assert answer["model"] == "r" and answer["usage"] == {"prompt_tokens": 11, "total_tokens": 11}
    assert answer["meta"]["api_version"] == {"version": "1"} and answer["meta"]["billed_units"]["input_tokens"] == 11
    bare = cohere.rerank_v1_answer(ranking(), return_documents=False).model_dump(exclude_none=True)
    assert bare["results"] == [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.5}]


def test_rerank_v2_answer_has_indices_and_scores_only():
    answer = cohere.rerank_v2_answer(ranking()).model_dump()
    assert set(answer) == {"id", "results", "meta"} and answer["meta"]["api_version"] == {"version": "2"}
    assert answer["results"] == [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.5}]


# Through the engine
ROUTES = {
    "/v1/embed": (cohere.embed_v1, cohere.CohereEmbedRequest),
    "/v2/embed": (cohere.embed_v2, cohere.CohereV2EmbedRequest),
    "/v1/rerank": (cohere.rerank_v1, cohere.RerankRequest),
    "/v2/rerank": (cohere.rerank_v2, cohere.CohereV2RerankRequest),
}
BAD_BODIES = [
    pytest.param("/v1/embed", {"texts": ["a"], "embedding_types": ["int4"]}, 400, "embedding_types", id="unknown-type"),
    pytest.param("/v1/embed", {"texts": "a"}, 400, "texts", id="texts-not-a-list"),
    pytest.param("/v1/embed", {"texts": ["a"], "truncate": "MIDDLE"}, 400, "truncate", id="unknown-truncate"),
    pytest.param("/v1/embed", {}, 400, "texts", id="no-inputs"),
    pytest.param("/v1/embed", {"texts": ["a"], "images": [IMAGE]}, 400, "images", id="texts-and-images"),
    pytest.param("/v1/embed", {"texts": ["a"], "embedding_types": []}, 400, "embedding_types", id="no-types"),
    pytest.param("/v1/embed", {"texts": []}, 400, "texts", id="empty-texts"),
    pytest.param("/v1/embed", {"texts": ["a"], "model": "no-such-model"}, 404, "model", id="unknown-model"),
    pytest.param("/v1/embed", {"texts": ["a"], "model": CLASSIFIER}, 400, "model", id="a-classifier-cannot-embed"),
    pytest.param("/v1/embed", {"model": SPLADE, "texts": ["a"]}, 400, "model", id="sparse-has-no-dense-vector"),
    pytest.param(
        "/v1/embed",
        {"model": SPLADE, "texts": ["a"], "embedding_types": ["base64"]},
        400,
        "embedding_types",
        id="sparse-has-no-base64",
    ),
    pytest.param("/v2/embed", {"texts": ["a"]}, 400, "model", id="v2-needs-model"),
    pytest.param(
        "/v2/embed",
        {"model": EMBEDDER, "texts": ["a"], "inputs": [{"content": [{"type": "text", "text": "a"}]}]},
        400,
        "inputs",
        id="texts-and-inputs",
    ),
    pytest.param(
        "/v2/embed",
        {"model": EMBEDDER, "inputs": [{"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
        400,
        "inputs",
        id="two-content-parts",
    ),
    pytest.param(
        "/v2/embed",
        {
            "model": CLIP,
            "inputs": [{"content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": IMAGE}]}],
        },
        400,
        "inputs",
        id="text-and-image-for-clip",
    ),
    pytest.param("/v2/embed", {"model": EMBEDDER, "inputs": [{"content": []}]}, 400, "inputs", id="no-content-parts"),
    pytest.param(
        "/v2/embed",
        {"model": EMBEDDER, "inputs": [{"content": [{"type": "audio", "audio": "x"}]}]},
        400,
        "inputs",
        id="unknown-part-type",
    ),
    pytest.param(
        "/v2/embed",
        {"model": EMBEDDER, "texts": ["a"], "output_dimension": "12"},
        400,
        "output_dimension",
        id="output-dimension-string",
    ),
    pytest.param("/v2/embed", {"model": EMBEDDER, "images": [IMAGE]}, 400, "model", id="images-for-a-text-model"),
    pytest.param(
        "/v2/embed",
        {"model": EMBEDDER, "texts": [" ".join(["word"] * 400)], "truncate": "NONE"},
        400,
        "texts",
        id="too-long-with-truncate-none",
    ),
    pytest.param(
        "/v2/embed",
        {"model": EMBEDDER, "texts": ["a b c d e f"], "max_tokens": 3, "truncate": "NONE"},
        400,
        "texts",
        id="over-max-tokens-with-truncate-none",
    ),
    pytest.param(
        "/v2/embed", {"model": EMBEDDER, "texts": ["a"], "max_tokens": 0}, 400, "max_tokens", id="max-tokens-0"
    ),
    pytest.param(
        "/v2/embed",
        {"model": COLPALI, "texts": ["a"], "embedding_types": ["int8"]},
        400,
        "embedding_types",
        id="multi-vector-has-no-int8",
    ),
    pytest.param("/v2/embed", {"model": COLPALI, "texts": ["a"]}, 400, "model", id="multi-vector-has-no-dense-vector"),
    pytest.param(
        "/v2/embed", {"model": SPLADE, "texts": ["a"], "embedding_types": ["float"]}, 400, "model", id="v2-sparse"
    ),
    pytest.param(
        "/v2/embed",
        {"model": EMBEDDER, "texts": ["a"], "output_dimension": 999},
        400,
        "output_dimension",
        id="output-dimension-too-large",
    ),
    pytest.param(
        "/v1/rerank", {"query": "q", "documents": [{"title": "no text"}]}, 400, "documents", id="document-without-text"
    ),
    pytest.param(
        "/v1/rerank",
        {"model": EMBEDDER, "query": "q", "documents": ["a"]},
        400,
        "model",
        id="an-embedder-cannot-rerank",
    ),
    pytest.param("/v2/rerank", {"query": "q", "documents": ["a"]}, 400, "model", id="v2-rerank-needs-model"),
    pytest.param(
        "/v1/rerank", {"query": "q", "documents": ["a", {"image": IMAGE}]}, 400, "documents", id="image-for-a-reranker"
    ),
    pytest.param(
        "/v1/rerank",
        {"model": CLIP, "query": "q", "documents": [{"text": "a", "image": IMAGE}]},
        400,
        "documents",
        id="text-and-image-in-one-document",
    ),
    pytest.param(
        "/v2/rerank", {"model": RERANKER, "query": "q", "documents": []}, 400, "documents", id="v2-no-documents"
    ),
]


@pytest.mark.parametrize(("path", "body", "status", "param"), BAD_BODIES)
def test_bad_bodies(serve, path, body, status, param):
    assert_refused(answer(serve, *ROUTES[path], body), status, param)


def test_embed_answers_from_the_service_outputs(serve, tokenizers):
    texts = ["a fox", "a lazy dog"]
    status, body, service = answer(
        serve, *ROUTES["/v2/embed"], {"model": EMBEDDER, "texts": texts, "embedding_types": ["float", "int8"]}
    )
    assert status == 200 and [row.input_ids for row in service.rows] == tokenizers[EMBEDDER].encode_texts(texts)
    assert body["texts"] == texts
    assert body["meta"]["billed_units"]["input_tokens"] == sum(row.length for row in service.rows)
    floats, codes = np.asarray(body["embeddings"]["float"]), np.asarray(body["embeddings"]["int8"])
    assert floats.shape == codes.shape == (2, 384) and codes.min() >= -127 and codes.max() <= 127
    assert np.corrcoef(codes.ravel(), floats.ravel())[0, 1] > 0.99  # the floats times the calibrated scale
    status, body, _ = answer(serve, *ROUTES["/v1/embed"], {"texts": texts})
    assert status == 200 and body["response_type"] == "embeddings_floats" and np.allclose(body["embeddings"], floats)


def test_max_tokens_cuts_input(serve):
    def tokens(max_tokens: int | None) -> int:
        body = {"model": EMBEDDER, "texts": ["one two three four five six seven"], "max_tokens": max_tokens}
        status, answered, _ = answer(serve, *ROUTES["/v2/embed"], body)
        assert status == 200, answered
        return answered["meta"]["billed_units"]["input_tokens"]

    assert tokens(None) == 9 and tokens(4) == 4


def test_rerank_answers_best_first(serve):
    documents = [{"text": "short", "id": 1}, {"text": "a much longer document"}]
    status, body, service = answer(
        serve, *ROUTES["/v1/rerank"], {"query": "q", "documents": documents, "return_documents": True}
    )
    tokens = sum(row.length for row in service.rows)
    assert status == 200 and body["model"] == RERANKER and body["usage"]["prompt_tokens"] == tokens
    assert [(r["index"], r["document"]["text"]) for r in body["results"]] == [
        (1, "a much longer document"),
        (0, "short"),
    ]
    status, body, _ = answer(
        serve,
        *ROUTES["/v2/rerank"],
        {"model": RERANKER, "query": "q", "top_n": 1, "documents": ["short", "a much longer document"]},
    )
    assert status == 200 and [set(r) for r in body["results"]] == [{"index", "relevance_score"}]


def test_a_mixed_input_is_refused_naming_why_for_a_model_that_embeds_one_part_per_input(serve):
    content = [{"type": "text", "text": "a red square"}, {"type": "image_url", "image_url": IMAGE}]
    body = {"model": CLIP, "inputs": [{"content": [{"type": "text", "text": "alone"}]}, {"content": content}]}
    message = assert_refused(answer(serve, *ROUTES["/v2/embed"], body), 400, "inputs")
    assert message == "inputs[1] holds 2 parts; model 'clip' is a clip model and embeds one text or one image per input"


def test_image_documents_are_jinas_objects_and_come_back_as_sent():
    body = cohere.RerankRequest.model_validate({"query": "q", "documents": ["d0", {"image": IMAGE}, {"text": "d2"}]})
    query = rank_query(body)
    assert query.documents == ("d0", IMAGE, "d2") and query.image_documents == (1,)
    ranked = Ranking(query, info("r", kind="clip"), order=[1, 0, 2], scores=[0.5, 0.9, 0.1], tokens=3)
    answer = cohere.rerank_v1_answer(ranked, return_documents=True).model_dump()
    assert [r["document"] for r in answer["results"]] == [{"image": IMAGE}, {"text": "d0"}, {"text": "d2"}]


def test_an_image_document_for_a_text_reranker_names_it(serve):
    body = {"query": "q", "documents": ["a", {"image": IMAGE}]}
    message = assert_refused(answer(serve, *ROUTES["/v1/rerank"], body), 400, "documents")
    assert message == "documents[1] is an image; model 'reranker' is a rerank model and ranks text documents"
