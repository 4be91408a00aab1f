"""ColBERT text models and BGE-M3 through a real server (issue 35), against what PyLate and FlagEmbedding answer
for the same checkpoints (tests/hybrid_reference.py): ColBERT vectors and MaxSim ranking on torch and ONNX
Runtime, BGE-M3's three outputs from `output_types` and its score modes, on every route that answers them, through
raw HTTP, the OpenAI SDK, Embento's typed client and BentoML's; and the refusals, each a 400 naming what is
accepted."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.asserts import assert_openai_error
from tests.conftest import running_server
from tests.hybrid_reference import DOCUMENTS, QUERIES
from tests.tolerance import assert_close, assert_same_vectors

pytestmark = pytest.mark.server

MIN_COSINE = 0.9999
COLBERT, COLBERT_ONNX, M3, SPLADE = "colbert", "colbert-onnx", "bge-m3", "splade"
ALL_THREE = ["dense", "sparse", "colbert"]
# Small enough that 60 ColBERT documents of 24 tokens (16 features) pass it in JSON, large enough that the
# other requests here stay under it.
MAX_RESPONSE_BYTES = 400_000


@pytest.fixture(scope="module")
def hybrid_server(tmp_path_factory: pytest.TempPathFactory, colbert_path, bge_m3_path, splade_path) -> Iterator[str]:
    models = [
        {"model_id": str(colbert_path), "served_model_name": COLBERT, "backend": "torch"},
        {"model_id": str(colbert_path), "served_model_name": COLBERT_ONNX, "backend": "onnx"},
        {"model_id": str(bge_m3_path), "served_model_name": M3, "backend": "torch"},
        {"model_id": str(splade_path), "served_model_name": SPLADE, "backend": "torch"},
    ]
    config = {"models": models, "max_response_bytes": MAX_RESPONSE_BYTES}
    with running_server(tmp_path_factory.mktemp("hybrid"), config) as (url, _):
        yield url


@pytest.fixture(scope="module")
def http(hybrid_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hybrid_server, timeout=120) as client:
        yield client


def post(http: httpx.Client, path: str, body: dict) -> dict:
    response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def multi_vector(item: dict) -> np.ndarray:
    flat = np.frombuffer(base64.b64decode(item["multi_vector"]), dtype="<f4")
    return flat.reshape(item["multi_vector_shape"])


# ColBERT
@pytest.mark.parametrize("model", [COLBERT, COLBERT_ONNX])
def test_colbert_queries_and_documents_equal_pylates(http, colbert_reference, model):
    queries = post(http, "/v1/embeddings", {"model": model, "input": list(QUERIES), "input_type": "search_query"})
    documents = post(http, "/v1/embeddings", {"model": model, "input": list(DOCUMENTS)})  # default: documents
    for data, expected in (
        (queries["data"], colbert_reference.queries),
        (documents["data"], colbert_reference.documents),
    ):
        for item, reference in zip(data, expected):
            assert_same_vectors(item["embedding"], reference, min_cosine=MIN_COSINE)


def test_colbert_takes_voyages_and_cohere_input_types(http, colbert_reference):
    voyage = post(http, "/v1/embeddings", {"model": COLBERT, "input": [QUERIES[0]], "input_type": "query"})
    assert_same_vectors(voyage["data"][0]["embedding"], colbert_reference.queries[0], min_cosine=MIN_COSINE)
    document = post(http, "/v1/embeddings", {"model": COLBERT, "input": [DOCUMENTS[0]], "input_type": "document"})
    assert_same_vectors(document["data"][0]["embedding"], colbert_reference.documents[0], min_cosine=MIN_COSINE)
    cohere = post(http, "/v1/embeddings", {"model": COLBERT, "input": [DOCUMENTS[0]], "input_type": "search_document"})
    assert cohere["data"][0]["embedding"] == document["data"][0]["embedding"]


def test_colbert_base64_and_output_types_carry_the_same_vectors(http, colbert_reference):
    body = {"model": COLBERT, "input": list(DOCUMENTS), "encoding_format": "base64"}
    shaped = post(http, "/v1/embeddings", body)["data"]
    typed = post(http, "/v1/embeddings", {**body, "output_types": ["colbert"]})["data"]
    for plain, asked, reference in zip(shaped, typed, colbert_reference.documents):
        assert set(asked) == {"object", "index", "multi_vector", "multi_vector_shape"}
        flat = np.frombuffer(base64.b64decode(plain["embedding"]), dtype="<f4").reshape(plain["shape"])
        assert_same_vectors(flat, reference, min_cosine=MIN_COSINE)
        assert_same_vectors(multi_vector(asked), reference, min_cosine=MIN_COSINE)


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank", "/rerank"])
def test_colbert_ranks_by_pylates_maxsim(http, colbert_reference, path):
    for query_index, query in enumerate(QUERIES):
        results = post(http, path, {"model": COLBERT, "query": query, "documents": list(DOCUMENTS)})["results"]
        scores = {item["index"]: item["relevance_score"] for item in results}
        assert_close([scores[i] for i in range(len(DOCUMENTS))], colbert_reference.scores[query_index])
        assert [item["index"] for item in results] == list(
            np.argsort(-colbert_reference.scores[query_index], kind="stable")
        )


# BGE-M3
def m3_embed(http: httpx.Client, texts: list[str], output_types: list[str], encoding_format: str = "float") -> list:
    return post(
        http,
        "/v1/embeddings",
        {"model": M3, "input": texts, "output_types": output_types, "encoding_format": encoding_format},
    )["data"]


def test_m3_all_three_equal_flagembeddings(http, m3_reference):
    texts = [*QUERIES, *DOCUMENTS]
    for encoding_format in ("float", "base64"):
        data = m3_embed(http, texts, ALL_THREE, encoding_format)
        for index, (item, sparse, colbert) in enumerate(zip(data, m3_reference.sparse, m3_reference.colbert)):
            assert set(item) == {"object", "index", "embedding", "sparse", "multi_vector"} | (
                {"multi_vector_shape"} if encoding_format == "base64" else set()
            )
            dense = (
                item["embedding"]
                if encoding_format == "float"
                else np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
            )
            assert_same_vectors(dense, m3_reference.dense[index])
            assert item["sparse"]["indices"] == sorted(sparse)
            assert_close(item["sparse"]["values"], [sparse[i] for i in item["sparse"]["indices"]])
            vectors = item["multi_vector"] if encoding_format == "float" else multi_vector(item)
            assert_same_vectors(vectors, colbert, min_cosine=MIN_COSINE)


def test_m3_answers_only_what_is_asked(http, m3_reference):
    plain = post(http, "/v1/embeddings", {"model": M3, "input": list(QUERIES)})["data"]
    assert_same_vectors([item["embedding"] for item in plain], m3_reference.dense[: len(QUERIES)])
    assert all(set(item) == {"object", "index", "embedding"} for item in plain)
    sparse_only = m3_embed(http, list(QUERIES), ["sparse"])
    assert all(set(item) == {"object", "index", "sparse"} for item in sparse_only)
    capped = post(
        http, "/v1/embeddings", {"model": M3, "input": list(QUERIES), "output_types": ["sparse"], "max_active_dims": 2}
    )["data"]
    for item, full in zip(capped, sparse_only):
        largest = sorted(
            sorted(zip(full["sparse"]["values"], full["sparse"]["indices"]), reverse=True)[:2], key=lambda pair: pair[1]
        )
        assert item["sparse"]["indices"] == [index for _, index in largest]


def test_m3_dense_codes_beside_float_sparse_weights(http):
    body = {"model": M3, "input": list(DOCUMENTS), "output_types": ["dense", "sparse"]}
    floats = post(http, "/v1/embeddings", body)["data"]
    codes = post(http, "/v1/embeddings", {**body, "encoding_format": "int8"})["data"]
    scale = next(card for card in http.get("/v1/models").json()["data"] if card["id"] == M3)["quantization"]
    step = scale["scales"]["32"] / 127
    for coded, plain in zip(codes, floats):
        assert coded["sparse"] == plain["sparse"]  # sparse weights stay floats
        np.testing.assert_allclose(np.array(coded["embedding"]) * step, plain["embedding"], atol=step / 2 + 1e-7)


def test_a_sparse_model_answers_its_one_output_type_under_its_key(http):
    plain = post(http, "/v1/embeddings", {"model": SPLADE, "input": list(DOCUMENTS)})["data"]
    typed = post(http, "/v1/embeddings", {"model": SPLADE, "input": list(DOCUMENTS), "output_types": ["sparse"]})
    assert [item["sparse"] for item in typed["data"]] == [item["embedding"] for item in plain]
    assert all(set(item) == {"object", "index", "sparse"} for item in typed["data"])


def test_m3_on_tei_and_cohere_routes(http, m3_reference):
    texts = list(DOCUMENTS)
    dense = post(http, "/embed", {"model": M3, "inputs": texts})
    assert_same_vectors(dense, m3_reference.dense[len(QUERIES) :])
    sparse = post(http, "/embed_sparse", {"model": M3, "inputs": texts})
    for entries, expected in zip(sparse, m3_reference.sparse[len(QUERIES) :]):
        assert [entry["index"] for entry in entries] == sorted(expected)
        assert_close([entry["value"] for entry in entries], [expected[e["index"]] for e in entries])
    cohere = post(
        http, "/v2/embed", {"model": M3, "texts": texts, "input_type": "search_document", "embedding_types": ["float"]}
    )
    assert_same_vectors(cohere["embeddings"]["float"], m3_reference.dense[len(QUERIES) :])


@pytest.mark.parametrize("mode", ["hybrid", "dense", "sparse", "colbert"])
def test_m3_rerank_equals_compute_score(http, m3_reference, mode):
    for query_index, query in enumerate(QUERIES):
        body = {"model": M3, "query": query, "documents": list(DOCUMENTS), "return_scores": True}
        if mode != "hybrid":  # hybrid is the default
            body["score_mode"] = mode
        results = post(http, "/v1/rerank", body)["results"]
        by_index = {item["index"]: item for item in results}
        got = [by_index[i]["relevance_score"] for i in range(len(DOCUMENTS))]
        assert_close(got, m3_reference.scores[mode][query_index], err_msg=mode)
        for name, scores in by_index[0]["scores"].items():
            assert_close(scores, m3_reference.scores[name][query_index][0], err_msg=name)


def test_m3_hybrid_weights_are_the_requests(http, m3_reference):
    weights = [1.0, 0.0, 3.0]
    results = post(
        http, "/rerank", {"model": M3, "query": QUERIES[0], "documents": list(DOCUMENTS), "weights": weights}
    )["results"]
    by_index = {item["index"]: item["relevance_score"] for item in results}
    expected = (weights[0] * m3_reference.scores["dense"][0] + weights[2] * m3_reference.scores["colbert"][0]) / 4
    assert_close([by_index[i] for i in range(len(DOCUMENTS))], expected)
    assert all("scores" not in item for item in results)  # not asked


def test_models_list_outputs_and_score_modes(http):
    cards = {card["id"]: card for card in http.get("/v1/models").json()["data"]}
    assert (cards[M3]["outputs"], cards[M3]["score_modes"]) == (ALL_THREE, ["hybrid", *ALL_THREE])
    assert cards[M3]["capabilities"] == ["embed", "embed_sparse", "rerank"]
    assert (cards[COLBERT]["outputs"], cards[COLBERT]["score_modes"], cards[COLBERT]["multi_vector"]) == (
        ["colbert"],
        [],
        True,
    )
    assert cards[COLBERT_ONNX]["backend"] == "onnx"


# Clients
def test_typed_client_and_openai_sdk_take_output_types(hybrid_server, m3_reference):
    from openai import OpenAI

    from embento import Client

    with Client(hybrid_server) as embento:
        (first,) = embento.embed([QUERIES[0]], model=M3, output_types=ALL_THREE)
        ranking = embento.rerank(QUERIES[0], list(DOCUMENTS), model=M3, score_mode="sparse")
    assert_same_vectors(first["dense"], m3_reference.dense[0])
    assert first["sparse"].keys() == m3_reference.sparse[0].keys()
    assert_same_vectors(first["colbert"], m3_reference.colbert[0], min_cosine=MIN_COSINE)
    assert [index for index, _ in ranking] == list(np.argsort(-m3_reference.scores["sparse"][0], kind="stable"))
    sdk = OpenAI(base_url=f"{hybrid_server}/v1", api_key="unused")
    answer = sdk.embeddings.create(model=M3, input=[QUERIES[0]], extra_body={"output_types": ["sparse", "colbert"]})
    item = answer.data[0].model_dump()  # the SDK asks for base64 (and decodes `embedding` only)
    assert item["sparse"]["indices"] == sorted(m3_reference.sparse[0])
    assert_same_vectors(multi_vector(item), m3_reference.colbert[0], min_cosine=MIN_COSINE)


def test_bentoml_client_takes_output_types(hybrid_server, m3_reference):
    import bentoml

    with bentoml.SyncHTTPClient(hybrid_server) as bento:
        answer = bento.embeddings({"model": M3, "input": [QUERIES[0]], "output_types": ["dense", "sparse"]})
    (item,) = answer["data"] if isinstance(answer, dict) else answer.data
    item = item if isinstance(item, dict) else item.model_dump()
    assert_same_vectors(item["embedding"], m3_reference.dense[0])
    assert item["sparse"]["indices"] == sorted(m3_reference.sparse[0])


# Refusals
REFUSALS = {  # case -> (path, body, param, words the message names)
    "dimensions on multi-vector": (
        "/v1/embeddings",
        {"model": COLBERT, "input": ["a"], "dimensions": 8},
        "dimensions",
        ["dimensions"],
    ),
    "dimensions on colbert output": (
        "/v1/embeddings",
        {"model": M3, "input": ["a"], "dimensions": 8, "output_types": ["colbert"]},
        "dimensions",
        ["dense"],
    ),
    "output type not served": (
        "/v1/embeddings",
        {"model": COLBERT, "input": ["a"], "output_types": ["sparse"]},
        "output_types",
        ["['colbert']"],
    ),
    "dense of a sparse model": (
        "/v1/embeddings",
        {"model": SPLADE, "input": ["a"], "output_types": ["dense"]},
        "output_types",
        ["['sparse']"],
    ),
    "score_mode without one": (
        "/v1/rerank",
        {"model": COLBERT, "query": "a", "documents": ["b"], "score_mode": "sparse"},
        "score_mode",
        ["BGE-M3"],
    ),
    "unknown score_mode": (
        "/v1/rerank",
        {"model": M3, "query": "a", "documents": ["b"], "score_mode": "mean"},
        "score_mode",
        ["hybrid", "colbert"],
    ),
    "weights of the wrong size": (
        "/v1/rerank",
        {"model": M3, "query": "a", "documents": ["b"], "weights": [1, 1]},
        "weights",
        ["3 numbers"],
    ),
    "int8 multi-vector": (
        "/v1/embeddings",
        {"model": M3, "input": ["a"], "output_types": ["colbert"], "encoding_format": "int8"},
        "encoding_format",
        ["float or base64"],
    ),
    "cohere embed asked for sparse": (
        "/v2/embed",
        {"model": M3, "texts": ["a"], "input_type": "search_document", "embedding_types": ["sparse"]},
        None,
        ["/v1/embeddings"],
    ),
    "answer past max_response_bytes": (
        "/v1/embeddings",
        {"model": COLBERT, "input": [DOCUMENTS[4]] * 60},
        "input",
        ["max_response_bytes", "base64"],
    ),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_refusals_name_what_is_accepted(http, case):
    path, body, param, words = REFUSALS[case]
    error = assert_openai_error(http.post(path, json=body), 400, param)
    assert all(word in error["message"] for word in words), error["message"]


def test_an_answer_under_max_response_bytes_in_base64_is_served(http):
    body = {"model": COLBERT, "input": [DOCUMENTS[4]] * 60, "encoding_format": "base64"}
    assert len(post(http, "/v1/embeddings", body)["data"]) == 60
