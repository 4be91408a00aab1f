"""Rerankers and classifiers as plain Python: kind detection, pair tokenization, and scores compared with
sentence-transformers' CrossEncoder and a direct transformers forward on the same random checkpoints."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from config.errors import InvalidRequest, ModelLoadError
from config.settings import ModelConfig
from models.base import TokenizedText
from models.inference.text_scorer import TextScorer
from models.kinds import detect_kind, model_kind
from models.preprocessing.text_tokenizer import TextTokenizer
from models.scores import activate, rank
from testkit.sentences import make_sentences
from tests.conftest import CLASSIFIER_LABELS
from tests.tolerance import assert_close

QUERY = "how do engineers keep their data private"


@pytest.fixture(scope="module")
def reranker(tiny_reranker_path) -> tuple[TextTokenizer, TextScorer]:
    cfg = ModelConfig(backend="torch", model_id=str(tiny_reranker_path), device="cpu")
    return TextTokenizer(tiny_reranker_path, cfg), TextScorer(tiny_reranker_path, cfg, "rerank")


@pytest.fixture(scope="module")
def classifier(tiny_classifier_path) -> tuple[TextTokenizer, TextScorer]:
    cfg = ModelConfig(backend="torch", model_id=str(tiny_classifier_path), device="cpu")
    return TextTokenizer(tiny_classifier_path, cfg), TextScorer(tiny_classifier_path, cfg, "classify")


def test_kind_is_read_from_the_checkpoint(
    minilm_path, tiny_bert_path, tiny_reranker_path, tiny_classifier_path, tmp_path
):
    from sentence_transformers import CrossEncoder

    assert detect_kind(minilm_path) == "embed"
    assert detect_kind(tiny_bert_path) == "embed"
    assert detect_kind(tiny_reranker_path) == "rerank"
    assert detect_kind(tiny_classifier_path) == "classify"
    CrossEncoder(str(tiny_reranker_path), local_files_only=True).save(str(tmp_path / "st-folder"))
    assert (tmp_path / "st-folder" / "modules.json").is_file()
    assert detect_kind(tmp_path / "st-folder") == "rerank"


def test_configured_kind_wins_and_causal_cross_encoders_rerank(tiny_classifier_path, tmp_path):
    assert model_kind(ModelConfig(backend="torch", model_id=str(tiny_classifier_path), kind="embed")) == "embed"
    assert model_kind(ModelConfig(backend="torch", model_id=str(tiny_classifier_path))) == "classify"
    causal = tmp_path / "causal"
    causal.mkdir()
    (causal / "config.json").write_text(json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}))
    assert detect_kind(causal) == "embed"  # a bare causal LM: an embedder unless its files say otherwise
    (causal / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "CrossEncoder"}))
    assert detect_kind(causal) == "rerank"


def test_rerank_scores_match_cross_encoder_predict(tiny_reranker_path, reranker):
    from sentence_transformers import CrossEncoder

    tokenizer, scorer = reranker
    documents = make_sentences(20, seed=5)
    logits = scorer.forward(TokenizedText.rows("test", *tokenizer.encode_pairs(QUERY, documents)))
    assert logits.shape == (20, 1) and scorer.info.activation == "sigmoid" and scorer.info.dimension == 1
    reference = CrossEncoder(str(tiny_reranker_path), local_files_only=True, device="cpu")
    short = [i for i, d in enumerate(documents) if len(d.split()) < 100]  # no truncation: identical inputs
    pairs = [(QUERY, documents[i]) for i in short]
    assert_close(activate(logits, "sigmoid")[short, 0], reference.predict(pairs))
    raw = reference.predict(pairs, activation_fn=lambda x: x)
    assert_close(logits[short, 0], raw)
    assert np.ptp(raw) > 0.1, "scores of a random checkpoint should still differ by input"


def test_long_documents_are_cut_and_the_query_kept(tiny_reranker_path, reranker):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer, scorer = reranker
    long_document = " ".join(["embedding"] * 2000)
    [ids], [segments] = tokenizer.encode_pairs(QUERY, [long_document])
    assert len(ids) == 512 and segments is not None and len(segments) == 512
    query_ids = AutoTokenizer.from_pretrained(str(tiny_reranker_path))(QUERY)["input_ids"]
    assert ids[: len(query_ids)] == query_ids  # [CLS] query [SEP] whole
    assert segments.count(0) == len(query_ids)
    reference = AutoTokenizer.from_pretrained(str(tiny_reranker_path))(
        QUERY, long_document, truncation="only_second", max_length=512, return_tensors="pt"
    )
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_reranker_path)).eval()
    with torch.inference_mode():
        expected = model(**reference).logits.numpy()
    assert_close(scorer.forward(TokenizedText.rows("test", [ids], [segments])), expected)


def test_a_query_too_long_for_any_document_is_refused(reranker):
    tokenizer, _ = reranker
    with pytest.raises(InvalidRequest, match="at most 508 tokens") as caught:
        tokenizer.encode_pairs(" ".join(["query"] * 509), ["a document"])
    assert caught.value.param == "query"
    assert len(tokenizer.encode_pairs(" ".join(["query"] * 508), ["a document"])[0][0]) == 512


@pytest.mark.parametrize("raw", [False, True])
def test_classifier_scores_match_a_transformers_forward(tiny_classifier_path, classifier, raw):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer, scorer = classifier
    texts = make_sentences(12, seed=9)
    logits = scorer.forward(TokenizedText.rows("test", tokenizer.encode_texts(texts)))
    assert scorer.info.labels == CLASSIFIER_LABELS and scorer.info.activation == "softmax"
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_classifier_path)).eval()
    features = AutoTokenizer.from_pretrained(str(tiny_classifier_path))(
        texts, padding=True, truncation=True, max_length=512, return_tensors="pt"
    )
    with torch.inference_mode():
        expected = model(**features).logits
    expected = expected if raw else torch.softmax(expected, dim=-1)
    got = logits if raw else activate(logits, scorer.info.activation)
    assert_close(got, expected.numpy())


def test_multi_label_classifiers_use_sigmoid(tiny_classifier_path, tmp_path):
    folder = Path(shutil.copytree(tiny_classifier_path, tmp_path / "multi"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "problem_type": "multi_label_classification"}))
    assert (
        TextScorer(folder, ModelConfig(backend="torch", model_id=str(folder)), "classify").info.activation == "sigmoid"
    )


def test_a_multi_label_head_cannot_rerank(tiny_classifier_path):
    with pytest.raises(ModelLoadError, match="a reranker needs one"):
        TextScorer(tiny_classifier_path, ModelConfig(backend="torch", model_id=str(tiny_classifier_path)), "rerank")


def test_an_encoder_without_a_head_cannot_score(tiny_bert_path):
    with pytest.raises(ModelLoadError, match="no trained classification head"):
        TextScorer(tiny_bert_path, ModelConfig(backend="torch", model_id=str(tiny_bert_path), kind="rerank"), "rerank")


def test_activations_and_ranking():
    logits = np.array([[0.0, 1.0, -1.0], [1000.0, -1000.0, 0.0]], dtype=np.float32)
    np.testing.assert_allclose(activate(logits, "sigmoid")[0], [0.5, 0.7310586, 0.2689414], atol=1e-6)
    assert np.isfinite(activate(logits, "sigmoid")).all() and np.isfinite(activate(logits, "softmax")).all()
    np.testing.assert_allclose(activate(logits, "softmax").sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(activate(logits, "identity"), logits)
    assert rank(np.array([0.1, 0.9, 0.5, 0.9]), None) == [1, 3, 2, 0]  # ties keep input order
    assert rank(np.array([0.1, 0.9, 0.5]), 2) == [1, 2]
    assert rank(np.array([0.1, 0.9]), 10) == [1, 0]


def test_tokenizer_is_safe_across_threads(reranker):
    """Pairs (only_second) and texts (longest_first) from several threads: a shared fast tokenizer fails
    this with 'Already borrowed'."""
    tokenizer, _ = reranker
    documents = [" ".join(["word"] * 300)] * 50
    failures: list[Exception] = []

    def hammer(pairs: bool) -> None:
        try:
            for _ in range(40):
                if pairs:
                    tokenizer.encode_pairs("a query", documents)
                else:
                    tokenizer.encode_texts(documents)
        except Exception as exc:
            failures.append(exc)

    threads = [threading.Thread(target=hammer, args=(i % 2 == 0,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
