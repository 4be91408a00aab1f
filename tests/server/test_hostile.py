"""Hostile input on every endpoint: malformed bodies, wrong types, impossible values, odd encodings.
Each is a 4xx in OpenAI's shape, never a 5xx, and the server answers correctly right after each."""

from __future__ import annotations

import json

import pytest

from config.settings import EmbentoConfig
from testkit.media import IMAGES, data_uri
from tests.asserts import assert_healthy, assert_openai_error
from tests.conftest import MINILM, TINY_CLAP, TINY_CLASSIFIER, TINY_CLIP, TINY_RERANKER

pytestmark = pytest.mark.server

RERANK = {"model": TINY_RERANKER, "query": "q", "documents": ["a", "b"]}
TOO_MANY_CHARS = EmbentoConfig().max_item_chars + 1
PNG = data_uri(*IMAGES["png"])


def case(path: str, body: object, status: int = 400, method: str = "POST", case_id: str = "") -> object:
    """`body` is JSON, or bytes sent as they are."""
    return pytest.param(method, path, body, status, id=case_id or path)


CASES = [
    # Rerank, on all three routes
    *(case(path, {**RERANK, "documents": []}, case_id=f"{path}-no-documents") for path in ("/rerank", "/v1/rerank")),
    case("/v2/rerank", {**RERANK, "documents": None}, case_id="v2-null-documents"),
    case("/v1/rerank", {**RERANK, "query": None}, case_id="null-query"),
    case("/rerank", {k: v for k, v in RERANK.items() if k != "query"}, case_id="missing-query"),
    case("/v1/rerank", {**RERANK, "top_n": 0}, case_id="top-n-0"),
    case("/v2/rerank", {**RERANK, "top_n": -1}, case_id="top-n-negative"),
    case("/v1/rerank", {**RERANK, "documents": [123]}, case_id="number-document"),
    case("/v1/rerank", {**RERANK, "documents": [{"text": None}]}, case_id="null-text-document"),
    case("/v1/rerank", {**RERANK, "documents": [{"txt": "a"}]}, case_id="unknown-document-object"),
    case("/v1/rerank", {**RERANK, "documents": ["d"] * 2049}, case_id="2049-documents"),
    case("/v1/rerank", {**RERANK, "model": MINILM}, case_id="rerank-on-an-embedder"),
    case("/v1/rerank", {**RERANK, "model": "nope"}, 404, case_id="rerank-unknown-model"),
    case("/v2/rerank", {k: v for k, v in RERANK.items() if k != "model"}, case_id="v2-without-model"),
    case("/rerank", {**RERANK, "model": TINY_CLIP, "documents": ["not an image"]}, case_id="image-rerank-text-doc"),
    # Classify
    case("/v1/classify", {"model": TINY_CLASSIFIER, "input": []}, case_id="classify-empty"),
    case("/v1/classify", {"model": TINY_CLASSIFIER, "input": [None]}, case_id="classify-null-item"),
    case("/classify", {"model": TINY_CLASSIFIER, "input": ""}, case_id="classify-empty-string"),
    case("/v1/classify", {"model": TINY_RERANKER, "input": ["x"]}, case_id="classify-on-a-reranker"),
    case("/classify", {"model": MINILM, "input": ["x"]}, case_id="classify-on-an-embedder"),
    # Images and audio
    case("/embeddings_image", {"model": TINY_CLIP, "input": ["not-a-uri"]}, case_id="image-not-a-uri"),
    case("/embeddings_image", {"model": TINY_CLIP, "input": ["data:image/png;base64,!!!"]}, case_id="image-bad-base64"),
    case(
        "/embeddings_image",
        {"model": TINY_CLIP, "input": ["data:image/png;base64,aGVsbG8="]},
        case_id="image-not-an-image",
    ),
    case("/embeddings_image", {"model": TINY_CLIP, "input": ["http://127.0.0.1:1/x.png"]}, case_id="image-url-off"),
    case("/embeddings_image", {"model": MINILM, "input": [PNG]}, case_id="image-on-a-text-model"),
    case(
        "/embeddings_audio",
        {"model": TINY_CLAP, "input": ["data:audio/wav;base64,UklGRg=="]},
        case_id="audio-truncated-wav",
    ),
    case("/embeddings_audio", {"model": TINY_CLAP, "input": [PNG]}, case_id="audio-that-is-an-image"),
    case("/v1/embeddings", {"model": TINY_CLIP, "input": [{"video": "x"}]}, case_id="unknown-typed-item"),
    case("/v1/embeddings", {"model": TINY_CLIP, "input": "x", "modality": "video"}, case_id="unknown-modality"),
    case("/v1/embeddings", {"model": MINILM, "input": [{"image": PNG}]}, case_id="typed-image-on-text-model"),
    # Bodies no JSON parser should trust
    case("/v1/embeddings", b"[" * 100_000 + b"]" * 100_000, case_id="deeply-nested-json"),
    case("/v1/embeddings", b'{"input": "\xff\xfe\xfd"}', case_id="invalid-utf8"),
    case("/v1/embeddings", b'{"input": "x", "dimensions": NaN}', case_id="nan-literal"),
    case("/v1/embeddings", b'{"input": "x", "dimensions": 1e999}', case_id="infinite-number"),
    case("/v1/embeddings", b'{"input": "\\ud800"}', case_id="lone-surrogate"),
    case(
        "/v1/rerank",
        b'{"query": "\\udfff", "documents": ["a"], "model": "tiny-reranker"}',
        case_id="lone-surrogate-query",
    ),
    case("/v1/embeddings", b"null", case_id="null-body"),
    case("/v1/embeddings", b'"just a string"', case_id="string-body"),
    case("/v1/embeddings", b"", case_id="empty-body"),
    case("/v1/embeddings", "\ufeff".encode() + b'{"input": "x"}', case_id="byte-order-mark"),
    case("/v1/embeddings", {"model": "m" * 10_000, "input": "x"}, 404, case_id="huge-model-name"),
    case(
        "/v1/embeddings",
        {"input": "x", "model": MINILM, "extra": {"deep": [1] * 1000}},
        200,
        case_id="unknown-fields-ignored",
    ),
    # Beyond the configured limits (max_item_chars)
    case("/v1/embeddings", {"model": MINILM, "input": ["a", "x" * TOO_MANY_CHARS]}, case_id="input-too-long"),
    case("/v1/rerank", {**RERANK, "query": "q" * TOO_MANY_CHARS}, case_id="query-too-long"),
    case("/rerank", {**RERANK, "documents": ["a", "d" * TOO_MANY_CHARS]}, case_id="document-too-long"),
    case("/v1/classify", {"model": TINY_CLASSIFIER, "input": "c" * TOO_MANY_CHARS}, case_id="classify-input-too-long"),
    # Methods and routes
    case("/v1/embeddings", None, 405, "DELETE", case_id="delete-embeddings"),
    case("/v1/rerank", None, 405, "GET", case_id="get-rerank"),
    case("/v1/models", {}, 405, case_id="post-models"),
    case("/v1/../v1/embeddings/../../etc/passwd", None, 404, "GET", case_id="path-traversal"),
]


@pytest.mark.parametrize("method, path, body, status", CASES)
def test_hostile_input_is_a_clean_4xx(client, method, path, body, status):
    if isinstance(body, bytes):
        response = client.request(method, path, content=body, headers={"content-type": "application/json"})
    else:
        response = client.request(
            method,
            path,
            content=None if body is None else json.dumps(body),
            headers={"content-type": "application/json"},
        )
    if status == 200:
        assert response.status_code == 200, response.text
    else:
        assert_openai_error(response, status)
    assert_healthy(client)


def test_the_suite_covers_every_endpoint():
    posted = {p.values[1] for p in CASES if p.values[0] == "POST"}
    assert {
        "/rerank",
        "/v1/rerank",
        "/v2/rerank",
        "/v1/classify",
        "/classify",
        "/embeddings_image",
        "/embeddings_audio",
        "/v1/embeddings",
    } <= posted
    assert len(CASES) >= 40
