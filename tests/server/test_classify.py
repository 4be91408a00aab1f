"""Classify through the running server: infinity's shape, every label, and scores equal to a direct
transformers forward on the same checkpoint (softmax, or logits when `raw_scores` is true)."""

from __future__ import annotations

import numpy as np
import pytest

from testkit.sentences import make_sentences
from tests.asserts import assert_healthy, assert_openai_error
from tests.conftest import CLASSIFIER_LABELS, MINILM, MINILM_CLASSIFIER, TINY_CLASSIFIER, TINY_RERANKER
from tests.tolerance import assert_close

pytestmark = pytest.mark.server
TEXTS = make_sentences(8, seed=4)


@pytest.fixture(scope="module")
def logits(tiny_classifier_path) -> np.ndarray:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_classifier_path)).eval()
    features = AutoTokenizer.from_pretrained(str(tiny_classifier_path))(
        TEXTS, padding=True, truncation=True, max_length=512, return_tensors="pt"
    )
    with torch.inference_mode():
        return model(**features).logits.numpy()


@pytest.mark.parametrize("path", ["/v1/classify", "/classify"])
@pytest.mark.parametrize("raw", [False, True])
def test_scores_match_a_transformers_forward(client, logits, path, raw):
    response = client.post(path, json={"model": TINY_CLASSIFIER, "input": TEXTS, "raw_scores": raw})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"object", "data", "model", "usage", "id", "created"} and body["object"] == "classify"
    assert len(body["data"]) == len(TEXTS)
    expected = logits if raw else np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    for row, want in zip(body["data"], expected):
        assert sorted(item["label"] for item in row) == sorted(CLASSIFIER_LABELS)
        scores = [item["score"] for item in row]
        assert scores == sorted(scores, reverse=True)
        got = [next(i["score"] for i in row if i["label"] == label) for label in CLASSIFIER_LABELS]
        assert_close(got, want)
    assert body["usage"]["prompt_tokens"] > len(TEXTS)


@pytest.mark.parametrize("raw", [False, True])
def test_a_classifier_saved_from_minilm_scores_as_cross_encoder_predicts(client, minilm_classifier_path, raw):
    """Its tokenizer.json (MiniLM's) pads and truncates every text to 128 tokens; the last text runs past that."""
    from sentence_transformers import CrossEncoder

    texts = TEXTS + [" ".join(["private embeddings on our own machines"] * 40)]
    response = client.post("/v1/classify", json={"model": MINILM_CLASSIFIER, "input": texts, "raw_scores": raw})
    assert response.status_code == 200, response.text
    got = [
        [next(i["score"] for i in row if i["label"] == label) for label in CLASSIFIER_LABELS]
        for row in response.json()["data"]
    ]
    reference = CrossEncoder(str(minilm_classifier_path), local_files_only=True, device="cpu")
    # one text at a time: CrossEncoder.predict reads a list of two strings as one pair
    assert_close(got, [reference.predict(text, apply_softmax=not raw) for text in texts])


def test_a_bare_string_and_the_default_model(client):
    body = client.post("/v1/classify", json={"input": "one text"}).json()
    assert body["model"] == TINY_CLASSIFIER and len(body["data"]) == 1
    assert abs(sum(item["score"] for item in body["data"][0]) - 1.0) < 1e-5


def test_models_list_shows_capabilities_and_labels(client):
    cards = {card["id"]: card for card in client.get("/v1/models").json()["data"]}
    assert cards[TINY_RERANKER]["capabilities"] == ["rerank"]
    assert cards[TINY_CLASSIFIER]["capabilities"] == ["classify"]
    assert cards[TINY_CLASSIFIER]["labels"] == CLASSIFIER_LABELS
    assert cards[MINILM]["capabilities"] == ["embed"]


# Every refusal, with the field it names, is tests/unit/gateway/wire/test_infinity.py's (BAD_CLASSIFIES), through the
# engine; here one, in OpenAI's shape, with the server still healthy after it.
def test_a_bad_classify_request_gets_openais_error_shape(client):
    error = assert_openai_error(client.post("/v1/classify", json={"model": TINY_RERANKER, "input": "x"}), 400, "model")
    assert TINY_CLASSIFIER in error["message"]  # says which models can
    assert_healthy(client)


def test_embedding_a_classifier_is_refused(client):
    error = assert_openai_error(
        client.post("/v1/embeddings", json={"model": TINY_CLASSIFIER, "input": "x"}), 400, "model"
    )
    assert MINILM in error["message"]
