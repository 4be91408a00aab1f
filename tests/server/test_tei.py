"""TEI's API through the real server: `huggingface_hub.InferenceClient(base_url)` as it calls TEI's root, and TEI's
raw bodies on /embed, /rerank (beside infinity's body on the same path), /predict, /similarity, /tokenize, /decode
and /info, each compared with a direct sentence-transformers or transformers computation; errors in TEI's shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from testkit.sentences import make_sentences
from tests.asserts import assert_openai_error, assert_tei_error
from tests.conftest import (
    CLASSIFIER_LABELS,
    MINILM,
    MINILM_CLASSIFIER,
    MINILM_RERANKER,
    QWEN3_EMBEDDER,
    TINY_CLASSIFIER,
    TINY_CLS,
    TINY_COLPALI,
    TINY_SPLADE,
)
from tests.tolerance import assert_close, assert_same_vectors

pytestmark = pytest.mark.server
TEXTS = make_sentences(5, seed=21)
QUERY = "which sentence talks about embeddings?"


@pytest.fixture(scope="module")
def minilm_st(minilm_path: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu", local_files_only=True)


@pytest.fixture(scope="module")
def hf(server: str):
    """TEI's client, online for this module only: the suite runs with HF_HUB_OFFLINE=1, under which
    huggingface_hub refuses every HTTP call, a local server's too."""
    from huggingface_hub import InferenceClient, constants

    with pytest.MonkeyPatch.context() as patch:  # huggingface_hub 1.x and 2.x read it on each request
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield InferenceClient(server)


@pytest.fixture(scope="module")
def classifier_logits(tiny_classifier_path: Path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_classifier_path)).eval()
    features = AutoTokenizer.from_pretrained(str(tiny_classifier_path))(TEXTS, padding=True, return_tensors="pt")
    with torch.inference_mode():
        return model(**features).logits.numpy()


def _softmax(logits: np.ndarray) -> np.ndarray:
    return np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)


def _by_label(row: list[dict]) -> list[float]:
    assert [item["score"] for item in row] == sorted((item["score"] for item in row), reverse=True)
    return [next(item["score"] for item in row if item["label"] == label) for label in CLASSIFIER_LABELS]


# huggingface_hub.InferenceClient(base_url): it posts every task to the root
def test_inference_client_feature_extraction_equals_sentence_transformers(hf, minilm_st):
    vectors = hf.feature_extraction(TEXTS[0])
    assert vectors.shape == (1, 384)
    assert_same_vectors(vectors, minilm_st.encode(TEXTS[:1]))
    assert_same_vectors(hf.feature_extraction(TEXTS[1], normalize=True, truncate=True), minilm_st.encode(TEXTS[1:2]))


def test_inference_client_sentence_similarity(hf, minilm_st):
    scores = hf.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:])
    vectors = minilm_st.encode(TEXTS)
    assert_close(scores, vectors[1:] @ vectors[0], rtol=1e-4)


def test_inference_client_text_classification(hf, classifier_logits):
    labels = hf.text_classification(TEXTS[0])
    assert sorted(item.label for item in labels) == sorted(CLASSIFIER_LABELS)
    assert_close(_by_label([{"label": i.label, "score": i.score} for i in labels]), _softmax(classifier_logits[0]))
    best = hf.text_classification(TEXTS[0], top_k=1)
    assert len(best) == 1 and best[0].label == CLASSIFIER_LABELS[int(np.argmax(classifier_logits[0]))]
    for function, expected in (("none", classifier_logits[0]), ("sigmoid", 1 / (1 + np.exp(-classifier_logits[0])))):
        scores = hf.text_classification(TEXTS[0], function_to_apply=function)
        assert_close(_by_label([{"label": i.label, "score": i.score} for i in scores]), expected)


# Raw TEI bodies
def test_embed_takes_every_input_form(client, minilm_st):
    single = client.post("/embed", json={"inputs": TEXTS[0]}).json()
    assert np.asarray(single).shape == (1, 384)
    batch = client.post("/embed", json={"inputs": TEXTS}).json()
    assert_same_vectors(batch, minilm_st.encode(TEXTS))
    ids = minilm_st.tokenizer(TEXTS[0])["input_ids"]
    assert_same_vectors(client.post("/embed", json={"inputs": ids}).json(), minilm_st.encode(TEXTS[:1]))
    cut = np.asarray(client.post("/embed", json={"inputs": TEXTS, "dimensions": 64}).json())
    full = minilm_st.encode(TEXTS)[:, :64]
    assert_same_vectors(cut, full / np.linalg.norm(full, axis=1, keepdims=True))


def test_embed_normalizes_by_default_as_tei_does(client):
    raw = np.asarray(
        client.post("/v1/embeddings", json={"model": TINY_CLS, "input": TEXTS}).json()["data"][0]["embedding"]
    )
    assert abs(np.linalg.norm(raw) - 1) > 1e-3  # this model's own vectors are not unit length
    tei = np.asarray(client.post("/embed", json={"model": TINY_CLS, "inputs": TEXTS[0]}).json()[0])
    assert_same_vectors(tei, raw / np.linalg.norm(raw))
    assert_close(np.linalg.norm(tei), 1.0)
    kept = client.post("/embed", json={"model": TINY_CLS, "inputs": TEXTS[0], "normalize": False}).json()[0]
    assert_same_vectors(kept, raw)


def test_rerank_answers_each_client_in_its_shape_on_one_path(client, minilm_reranker_path):
    from sentence_transformers import CrossEncoder

    expected = CrossEncoder(str(minilm_reranker_path), local_files_only=True, device="cpu").predict(
        [(QUERY, text) for text in TEXTS]
    )
    tei = client.post("/rerank", json={"query": QUERY, "texts": TEXTS, "model": MINILM_RERANKER, "return_text": True})
    assert tei.status_code == 200, tei.text
    results = tei.json()
    assert isinstance(results, list) and [r["index"] for r in results] == np.argsort(-expected).tolist()
    assert all(set(r) == {"index", "score", "text"} and r["text"] == TEXTS[r["index"]] for r in results)
    assert_close([r["score"] for r in results], np.sort(expected)[::-1])
    infinity = client.post("/rerank", json={"query": QUERY, "documents": TEXTS, "model": MINILM_RERANKER}).json()
    assert infinity["object"] == "rerank" and [r["index"] for r in infinity["results"]] == [r["index"] for r in results]
    bare = client.post("/rerank", json={"query": QUERY, "texts": TEXTS[:2], "model": MINILM_RERANKER}).json()
    assert all(set(r) == {"index", "score"} for r in bare)


def test_predict_single_pair_and_batch(client, classifier_logits, minilm_classifier_path):
    from sentence_transformers import CrossEncoder

    single = client.post("/predict", json={"inputs": TEXTS[0], "model": TINY_CLASSIFIER}).json()
    assert_close(_by_label(single), _softmax(classifier_logits[0]))
    raw = client.post(
        "/predict", json={"inputs": [[t] for t in TEXTS], "model": TINY_CLASSIFIER, "raw_scores": True}
    ).json()
    assert_close([_by_label(row) for row in raw], classifier_logits)
    reference = CrossEncoder(str(minilm_classifier_path), local_files_only=True, device="cpu")
    pair = client.post("/predict", json={"inputs": [QUERY, TEXTS[0]], "model": MINILM_CLASSIFIER}).json()
    assert_close(_by_label(pair), reference.predict([(QUERY, TEXTS[0])], apply_softmax=True)[0])
    mixed = client.post("/predict", json={"inputs": [[QUERY, TEXTS[1]], [TEXTS[2]]], "model": MINILM_CLASSIFIER}).json()
    assert_close(_by_label(mixed[0]), reference.predict([(QUERY, TEXTS[1])], apply_softmax=True)[0])
    assert_close(_by_label(mixed[1]), reference.predict(TEXTS[2], apply_softmax=True))


def test_similarity(client, minilm_st):
    body = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}, "parameters": {"truncate": True}}
    vectors = minilm_st.encode(TEXTS)
    assert_close(client.post("/similarity", json=body).json(), vectors[1:] @ vectors[0], rtol=1e-4)


def test_tokenize_equals_the_tokenizers_own_offsets(client, minilm_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path))
    text = "Héllo, self-hosted wörld!"
    tokens = client.post("/tokenize", json={"inputs": [text, "b"]}).json()
    assert len(tokens) == 2
    encoded = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    assert [t["id"] for t in tokens[0]] == encoded["input_ids"]
    for token, (start, stop), special, piece in zip(
        tokens[0],
        encoded["offset_mapping"],
        encoded["special_tokens_mask"],
        tokenizer.convert_ids_to_tokens(encoded["input_ids"]),
    ):
        assert token["special"] is bool(special)
        if special:
            assert (token["text"], token["start"], token["stop"]) == (piece, None, None)
        else:
            assert (token["start"], token["stop"]) == (start, stop)
            assert token["text"] == text[start:stop]
    bare = client.post("/tokenize", json={"inputs": text, "add_special_tokens": False}).json()[0]
    assert [t["id"] for t in bare] == tokenizer(text, add_special_tokens=False)["input_ids"]


def test_tokenize_with_a_prompt_and_decode(client, qwen3_embedder_path):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(qwen3_embedder_path), device="cpu", local_files_only=True)
    tokens = client.post("/tokenize", json={"inputs": "fox", "model": QWEN3_EMBEDDER, "prompt_name": "query"}).json()
    expected = reference.tokenize([reference.prompts["query"] + "fox"])["input_ids"][0].tolist()
    assert [t["id"] for t in tokens[0]] == expected
    decoded = client.post("/decode", json={"ids": [expected], "model": QWEN3_EMBEDDER}).json()
    assert decoded == [reference.tokenizer.decode(expected, skip_special_tokens=True)]
    assert client.post("/decode", json={"ids": [101, 7592, 102]}).json() == ["hello"]


def test_root_dispatches_by_body_then_by_model_kind(client, minilm_st, classifier_logits):
    assert_same_vectors(client.post("/", json={"inputs": TEXTS[:2]}).json(), minilm_st.encode(TEXTS[:2]))
    predicted = client.post("/", json={"inputs": TEXTS[0], "model": TINY_CLASSIFIER}).json()
    assert_close(_by_label(predicted), _softmax(classifier_logits[0]))
    sparse = client.post("/", json={"inputs": "a fox", "model": TINY_SPLADE}).json()
    assert set(sparse[0][0]) == {"index", "value"}
    ranked = client.post("/", json={"query": QUERY, "texts": TEXTS[:3], "model": MINILM_RERANKER}).json()
    assert sorted(r["index"] for r in ranked) == [0, 1, 2]
    similar = client.post("/", json={"inputs": {"source_sentence": "a", "sentences": ["b", "c"]}}).json()
    assert len(similar) == 2


def test_info_carries_teis_fields(client):
    info = client.get("/info").json()
    assert info["model_id"] == MINILM and info["served_model_name"] == MINILM
    assert info["model_dtype"] == "float32" and info["max_input_length"] == 256
    assert info["model_type"] == {"embedding": {"pooling": None}}
    assert info["max_client_batch_size"] == 2048 and info["max_batch_requests"] == 32
    assert info["max_batch_tokens"] == 16384 and info["auto_truncate"] is True and info["version"]
    assert "limits" in info and "models" in info


# Errors: TEI's shape on TEI's routes. Each refusal, with the field it names, is
# tests/unit/gateway/wire/test_tei.py's, through the engine; here the shape, for one the framework makes, one the
# engine makes before any work, and one at the root.
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/embed", {"inputs": 5}),
        ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "model": TINY_COLPALI}),
        ("/", {"query": "q", "model": MINILM_RERANKER}),
    ],
)
def test_bad_tei_requests_get_teis_error_shape(client, path, body):
    assert_tei_error(client.post(path, json=body), 400)


def test_malformed_json_on_a_tei_route_gets_teis_shape(client):
    response = client.post("/embed", content=b"{not json", headers={"content-type": "application/json"})
    message = assert_tei_error(response, 400)
    assert "JSON" in message


def test_rerank_errors_follow_the_body(client):
    both = client.post("/rerank", json={"query": "q", "texts": ["a"], "documents": ["b"], "model": MINILM_RERANKER})
    assert "not both" in assert_openai_error(both, 400, "texts")["message"]
    empty = client.post("/rerank", json={"query": "q", "texts": [], "model": MINILM_RERANKER})
    assert "empty" in assert_tei_error(empty, 400)
    assert_openai_error(client.post("/rerank", json={"query": "q", "documents": [], "model": MINILM_RERANKER}), 400)
    # refused by the framework before any of our code runs: the shape still follows the body
    assert_tei_error(client.post("/rerank", json={"query": 5, "texts": ["a"], "model": MINILM_RERANKER}), 400)
    assert_openai_error(
        client.post("/rerank", json={"query": 5, "documents": ["a"], "model": MINILM_RERANKER}), 400, "query"
    )


def test_tiktoken_ids_get_an_error_naming_the_cause(client):
    error = assert_openai_error(
        client.post("/v1/embeddings", json={"model": MINILM, "input": [[100263, 5]]}), 400, "input"
    )
    assert "tiktoken" in error["message"] and "check_embedding_ctx_length=False" in error["message"]
