"""The Voyage adapter (`gateway/wire/voyage.py`) over the real `Engine`, a fake model service and MiniLM's real
tokenizer (`fake_engine.py`). POST /v1/contextualizedembeddings: documents' chunks embedded in their document's
context (late chunking: one row per document), queries alone, auto-chunking, its dtypes and base64. POST
/v1/multimodalembeddings: each input's content parts as one (mixed) input, its answer, and the bodies both routes
refuse before any row is sent."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from starlette.responses import Response

from gateway.answering import answered
from gateway.queries import InputItem, mixed_input
from gateway.wire import openai, voyage
from models.base import Truncation
from tests.unit.gateway.fake_engine import CLIP, DIMENSION, EMBEDDER, answer, assert_refused

IMAGE = "data:image/png;base64,iVBORw0KGgo="


def contextualized(serve, body: dict):
    return answer(serve, voyage.contextualized, voyage.ContextualizedRequest, body)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"inputs": []}, "inputs", id="no-inputs"),
        pytest.param({"inputs": [["a", "b"]], "input_type": "query"}, "inputs", id="a-query-of-two-chunks"),
        pytest.param({"inputs": [["a"]], "chunk_size": 8}, "chunk_size", id="chunk-size-without-auto-chunking"),
        pytest.param({"inputs": [["a"]], "output_dtype": "float16"}, "output_dtype", id="unknown-dtype"),
        pytest.param({"inputs": [["a"]], "encoding_format": "float"}, "encoding_format", id="only-base64"),
        pytest.param({"inputs": [[1, 2]]}, "inputs", id="token-ids"),
        pytest.param({"inputs": [["a"]], "model": "no-such-model"}, "model", id="unknown-model"),
    ],
)
def test_bad_bodies_are_refused_naming_their_field(serve, body, param):
    status = 404 if param == "model" else 400
    assert_refused(contextualized(serve, body), status, param)


def test_each_documents_chunks_come_back_in_order_from_one_row_per_document(serve):
    documents = [["a quick fox", "jumps over", "the lazy dog"], ["a single chunk"]]
    status, body, service = contextualized(serve, {"inputs": documents, "input_type": "document"})
    assert status == 200 and body["model"] == EMBEDDER
    assert [len(service.rows), [len(row.spans) for row in service.rows]] == [2, [3, 1]]  # late chunking
    assert [document["index"] for document in body["data"]] == [0, 1]
    assert [[chunk["index"] for chunk in document["data"]] for document in body["data"]] == [[0, 1, 2], [0]]
    vectors = np.array([chunk["embedding"] for document in body["data"] for chunk in document["data"]])
    assert vectors.shape == (4, DIMENSION) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert len({vector.tobytes() for vector in vectors}) == 4  # each chunk its own vector
    assert body["usage"]["total_tokens"] == sum(row.length for row in service.rows)


def test_queries_are_embedded_alone(serve):
    status, body, service = contextualized(serve, {"inputs": [["first query"], ["second"]], "input_type": "query"})
    assert status == 200 and len(service.rows) == 2 and all(row.spans is None for row in service.rows)
    assert [(document["index"], len(document["data"])) for document in body["data"]] == [(0, 1), (1, 1)]


def test_base64_holds_the_little_endian_bytes_of_each_dtype(serve):
    inputs = [["a quick fox", "jumps"]]
    _, numbers, _ = contextualized(serve, {"inputs": inputs})
    _, packed, _ = contextualized(serve, {"inputs": inputs, "encoding_format": "base64"})
    for plain, encoded in zip(numbers["data"][0]["data"], packed["data"][0]["data"]):
        vector = np.frombuffer(base64.b64decode(encoded["embedding"]), dtype="<f4")
        assert np.allclose(vector, plain["embedding"], atol=1e-6)
    _, codes, _ = contextualized(serve, {"inputs": inputs, "output_dtype": "int8"})
    _, packed_codes, _ = contextualized(serve, {"inputs": inputs, "output_dtype": "int8", "encoding_format": "base64"})
    for plain, encoded in zip(codes["data"][0]["data"], packed_codes["data"][0]["data"]):
        assert np.frombuffer(base64.b64decode(encoded["embedding"]), dtype=np.int8).tolist() == plain["embedding"]


def test_a_matryoshka_dimension_cuts_each_vector(serve):
    status, body, _ = contextualized(serve, {"inputs": [["a quick fox"]], "output_dimension": 8})
    vector = np.array(body["data"][0]["data"][0]["embedding"])
    assert status == 200 and vector.shape == (8,) and np.isclose(np.linalg.norm(vector), 1, atol=1e-5)


def test_auto_chunking_cuts_each_document_and_returns_each_chunks_text(serve):
    document = " ".join(f"word{i}" for i in range(40))
    body = {"inputs": [document, "short"], "enable_auto_chunking": True, "chunk_size": 16}
    status, answered, service = contextualized(serve, body)
    assert status == 200 and len(service.rows) == 2
    chunks = [[chunk["text"] for chunk in item["data"]] for item in answered["data"]]
    assert len(chunks[0]) > 1 and chunks[1] == ["short"]
    assert " ".join(text.strip() for text in chunks[0]).split() == document.split()  # cut at whitespace, in order


# POST /v1/multimodalembeddings
def multimodal(serve, body: dict):
    return answer(serve, voyage.multimodal, voyage.MultimodalRequest, body)


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def test_each_inputs_content_is_one_input_its_parts_in_order():
    content = [
        text("a chart"),
        {"type": "image_base64", "image_base64": IMAGE},
        {"type": "image_url", "image_url": "http://x/y.png"},
    ]
    body = voyage.MultimodalRequest.model_validate(
        {"inputs": [{"content": content}, {"content": [text("alone")]}], "input_type": "document", "truncation": False}
    )
    query = voyage.multimodal_query(body)
    parts = (InputItem("text", "a chart"), InputItem("image", IMAGE), InputItem("image", "http://x/y.png"))
    assert query.items == (mixed_input(parts), InputItem("text", "alone")) and query.items[0].parts == parts
    assert query.input_type == "search_document" and query.items_param == "inputs"
    assert query.truncation == Truncation(enabled=False) and query.output_types == ("float",)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"inputs": []}, "inputs", id="no-inputs"),
        pytest.param({"inputs": [{"content": []}]}, "inputs", id="empty-content"),
        pytest.param({"inputs": [{"content": [text("")]}]}, "inputs", id="empty-text"),
        pytest.param({"inputs": [{"content": [{"type": "video_url", "video_url": "x"}]}]}, "inputs", id="unknown-type"),
        pytest.param({"inputs": [{"content": [{"type": "text"}]}]}, "inputs", id="text-part-without-text"),
        pytest.param(
            {"inputs": [{"content": [{"type": "image_url", "image_url": "http://x", "image_base64": IMAGE}]}]},
            "inputs",
            id="both-image-fields",
        ),
        pytest.param({"inputs": [{"content": [{"type": "image_base64"}]}]}, "inputs", id="neither-image-field"),
        pytest.param(
            {"inputs": [{"content": [text("a")]}], "output_encoding": "float"}, "output_encoding", id="only-base64"
        ),
        pytest.param(
            {"inputs": [{"content": [text("a")]}], "input_type": "search"}, "input_type", id="unknown-input-type"
        ),
        pytest.param({"inputs": [{"content": [text("a"), text("b")]}]}, "inputs", id="two-parts-to-a-text-embedder"),
        pytest.param(
            {
                "model": CLIP,
                "inputs": [{"content": [text("a red square"), {"type": "image_base64", "image_base64": IMAGE}]}],
            },
            "inputs",
            id="text-and-image-to-clip",
        ),
        pytest.param({"inputs": [{"content": [text("a")]}], "model": "no-such-model"}, "model", id="unknown-model"),
    ],
)
def test_bad_multimodal_bodies_are_refused_naming_their_field(serve, body, param):
    status = 404 if param == "model" else 400
    assert_refused(multimodal(serve, body), status, param)


def test_a_mixed_input_to_clip_is_refused_naming_why(serve):
    body = {"model": CLIP, "inputs": [{"content": [text("a"), {"type": "image_url", "image_url": "http://x/y.png"}]}]}
    message = assert_refused(multimodal(serve, body), 400, "inputs")
    assert message == "inputs[0] holds 2 parts; model 'clip' is a clip model and embeds one text or one image per input"


def test_text_inputs_answer_voyages_shape_in_numbers_or_base64(serve):
    inputs = [{"content": [text("a quick fox")]}, {"content": [text("jumps")]}]
    status, body, service = multimodal(serve, {"inputs": inputs, "input_type": "query"})
    assert status == 200 and body["object"] == "list" and body["model"] == EMBEDDER and len(service.rows) == 2
    assert [(item["object"], item["index"]) for item in body["data"]] == [("embedding", 0), ("embedding", 1)]
    tokens = sum(row.length for row in service.rows)
    assert body["usage"] == {"text_tokens": tokens, "image_pixels": 0, "video_pixels": 0, "total_tokens": tokens}
    for name in ("output_encoding", "encoding_format"):  # Voyage's API name and the SDK's
        _, packed, _ = multimodal(serve, {"inputs": inputs, "input_type": "query", name: "base64"})
        for plain, encoded in zip(body["data"], packed["data"]):
            vector = np.frombuffer(base64.b64decode(encoded["embedding"]), dtype="<f4")
            assert np.allclose(vector, plain["embedding"], atol=1e-6)
    _, cut, _ = multimodal(serve, {"inputs": inputs, "output_dimension": 8, "output_dtype": "int8"})
    assert np.asarray(cut["data"][0]["embedding"]).shape == (8,)


def _written(result) -> bytes:
    """The bytes the client gets: a Response's body, or BentoML's JSON of a pydantic answer."""
    return result.body if isinstance(result, Response) else result.model_dump_json().encode()


@pytest.mark.parametrize(
    ("route", "body"),
    [
        pytest.param(
            voyage.contextualized,
            voyage.ContextualizedRequest(inputs=[["a fox"]], input_type="query"),
            id="contextualized",
        ),
        pytest.param(
            voyage.multimodal,
            voyage.MultimodalRequest.model_validate({"inputs": [{"content": [text("a fox")]}], "input_type": "query"}),
            id="multimodal",
        ),
    ],
)
def test_floats_are_written_as_on_openais_route_in_float32s_shortest_digits(serve, route, body):
    async def both(engine):
        voyages = await answered(route, engine, body)
        openais = await answered(openai.embed, engine, openai.EmbeddingRequest(input=["a fox"], input_type="query"))
        return _written(voyages), _written(openais)

    (voyages, openais), _ = serve(both)
    ours = json.loads(voyages, parse_float=str)["data"][0]  # each number as the digits written
    vector = ours["data"][0]["embedding"] if "data" in ours else ours["embedding"]
    assert vector == json.loads(openais, parse_float=str)["data"][0]["embedding"]
    significant = [digits.lstrip("-").split("e")[0].replace(".", "").strip("0") for digits in vector]
    assert max(map(len, significant)) <= 9  # a float32 needs at most 9 digits; its float64 repr up to 17
