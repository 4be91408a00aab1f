"""The Voyage adapter (`gateway/wire/voyage.py`, POST /v1/contextualizedembeddings) over the real `Engine`, a fake
model service and MiniLM's real tokenizer (`fake_engine.py`): documents' chunks embedded in their document's
context (late chunking: one row per document), queries alone, auto-chunking, its dtypes and base64, and the
bodies it refuses before any row is sent."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from gateway.wire import voyage
from tests.unit.gateway.fake_engine import DIMENSION, EMBEDDER, answer, assert_refused


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
