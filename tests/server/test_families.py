"""Today's model families through the real server, beside MiniLM: a Qwen3 embedder with an instruction, causal-
LM rerankers in both layouts, SPLADE on `/v1/embeddings` and TEI's `/embed_sparse`, and the per-request
controls (truncate, truncation_direction, normalize) with their errors."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from config.settings import EmbentoConfig, ModelConfig
from models.inference.text_scorer import TextScorer
from models.preprocessing.text_tokenizer import TextTokenizer
from tests.conftest import (
    MINILM,
    PLAIN_RERANKER_MAX_TOKENS,
    QWEN3_EMBEDDER,
    QWEN3_RERANKER,
    QWEN3_RERANKER_PLAIN,
    TINY_RERANKER,
    TINY_SPLADE,
)
from tests.references import INSTRUCTION, QUERY, TEXTS, pair_logits
from tests.tolerance import assert_close, assert_same_vectors


def _vectors(client, **body) -> np.ndarray:
    response = client.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    return np.array([item["embedding"] for item in response.json()["data"]])


def _error(client, path: str, **body) -> dict:
    response = client.post(path, json=body)
    assert response.status_code == 400, response.text
    return response.json()["error"]


def _tei_error(client, path: str, **body) -> str:
    """A TEI route's 400, in TEI's shape: its message."""
    response = client.post(path, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error_type"] == "Validation"
    return response.json()["error"]


def test_models_list_reports_the_families(client):
    cards = {card["id"]: card for card in client.get("/v1/models").json()["data"]}
    assert cards[TINY_SPLADE]["sparse"] is True and cards[TINY_SPLADE]["dimension"] == 30522
    assert cards[TINY_SPLADE]["capabilities"] == ["embed_sparse", "embed"]
    assert cards[QWEN3_EMBEDDER]["sparse"] is False and cards[QWEN3_EMBEDDER]["max_input_tokens"] == 48
    assert cards[QWEN3_RERANKER]["capabilities"] == cards[QWEN3_RERANKER_PLAIN]["capabilities"] == ["rerank"]


def test_qwen3_embedder_matches_sentence_transformers(client, qwen3_embedder_path):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(qwen3_embedder_path), device="cpu", local_files_only=True)
    assert_same_vectors(_vectors(client, model=QWEN3_EMBEDDER, input=TEXTS), reference.encode(TEXTS))
    with ThreadPoolExecutor(8) as pool:  # one at a time, concurrently: merged into batches of mixed lengths
        singles = list(
            pool.map(lambda text: _vectors(client, model=QWEN3_EMBEDDER, input=text, prompt_name="query"), TEXTS)
        )
    assert_same_vectors(np.concatenate(singles), reference.encode(TEXTS, prompt_name="query"))
    instructed = _vectors(client, model=QWEN3_EMBEDDER, input=TEXTS, instruction=INSTRUCTION)
    assert_same_vectors(instructed, reference.encode(TEXTS, prompt=f"Instruct: {INSTRUCTION}\nQuery:"))


def test_usage_counts_the_instruction_tokens(client):
    plain = client.post("/v1/embeddings", json={"model": QWEN3_EMBEDDER, "input": "fox"}).json()["usage"]
    instructed = client.post(
        "/v1/embeddings", json={"model": QWEN3_EMBEDDER, "input": "fox", "instruction": INSTRUCTION}
    ).json()["usage"]
    assert instructed["prompt_tokens"] > plain["prompt_tokens"] + 5


@pytest.mark.parametrize("served", [QWEN3_RERANKER, QWEN3_RERANKER_PLAIN])
def test_causal_rerankers_score_as_in_process(client, served, qwen3_reranker_path, plain_qwen3_reranker_path):
    """The server's scores equal the in-process ones, which `test_models_families` checks against
    CrossEncoder.predict and the card's formula; documents past the limit included."""
    path = qwen3_reranker_path if served == QWEN3_RERANKER else plain_qwen3_reranker_path
    cfg = ModelConfig(backend="torch", model_id=str(path), max_seq_length=PLAIN_RERANKER_MAX_TOKENS)
    expected = pair_logits(TextTokenizer(path, cfg, "rerank"), TextScorer(path, cfg, "rerank"), TEXTS, INSTRUCTION)
    response = client.post(
        "/v1/rerank",
        json={"model": served, "query": QUERY, "documents": TEXTS, "instruction": INSTRUCTION, "raw_scores": True},
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    scores = np.array([r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])])
    assert_close(scores, expected)
    sigmoid = client.post(
        "/rerank", json={"model": served, "query": QUERY, "documents": TEXTS[:3], "instruction": INSTRUCTION}
    ).json()["results"]
    by_index = {r["index"]: r["relevance_score"] for r in sigmoid}
    assert_close([by_index[i] for i in range(3)], 1 / (1 + np.exp(-expected[:3])))


def test_splade_on_both_routes(client, splade_path):
    from sentence_transformers import SparseEncoder

    expected = SparseEncoder(str(splade_path), device="cpu", local_files_only=True).encode(TEXTS).to_dense().numpy()
    data = client.post("/v1/embeddings", json={"model": TINY_SPLADE, "input": TEXTS}).json()["data"]
    tei = client.post("/embed_sparse", json={"inputs": TEXTS, "truncation_direction": "Right"})
    assert tei.status_code == 200, tei.text
    for item, entries, dense in zip(data, tei.json(), expected):
        active = np.flatnonzero(dense)
        assert item["embedding"]["indices"] == [entry["index"] for entry in entries] == active.tolist()
        assert_close(item["embedding"]["values"], dense[active])
        assert_close([entry["value"] for entry in entries], dense[active])
    top = client.post("/embed_sparse", json={"inputs": TEXTS[5], "max_active_dims": 4}).json()[0]
    assert len(top) == 4 and [e["index"] for e in top] == sorted(e["index"] for e in top)
    assert min(e["value"] for e in top) >= np.sort(expected[5])[-4] - 1e-6


def test_sparse_refusals(client):
    assert _error(client, "/v1/embeddings", model=TINY_SPLADE, input="a", dimensions=8)["param"] == "dimensions"
    assert (
        _error(client, "/v1/embeddings", model=TINY_SPLADE, input="a", encoding_format="base64")["param"]
        == "encoding_format"
    )
    assert _error(client, "/v1/embeddings", model=MINILM, input="a", max_active_dims=3)["param"] == "max_active_dims"
    assert "cannot embed_sparse" in _tei_error(client, "/embed_sparse", model=MINILM, inputs="a")
    # TEI's /embed has no sparse shape: refused before any work, naming the route that has (TEI's normalize: true
    # must not hide that behind a normalize error)
    assert "use /embed_sparse" in _tei_error(client, "/embed", model=TINY_SPLADE, inputs="a")


def test_truncate_false_refuses_long_input_and_names_it(client):
    long_text = " ".join(TEXTS[-3:])
    error = _error(client, "/v1/embeddings", model=MINILM, input=["short", long_text], truncate=False)
    assert error["param"] == "input" and "input[1] is" in error["message"] and "at most 256" in error["message"]
    error = _error(client, "/v1/rerank", model=QWEN3_RERANKER, query=QUERY, documents=[long_text], truncate=False)
    assert error["param"] == "documents" and "documents[0]" in error["message"]
    assert "inputs[0] is" in _tei_error(client, "/embed_sparse", model=TINY_SPLADE, inputs=[long_text], truncate=False)
    accepted = client.post("/v1/embeddings", json={"model": MINILM, "input": long_text, "truncate": True})
    assert accepted.status_code == 200


def test_truncation_direction_left_keeps_the_end(client):
    words = " ".join(f"word{i}" for i in range(600))
    ends = _vectors(client, model=MINILM, input=[words, " ".join(words.split()[-150:])], truncation_direction="left")
    starts = _vectors(client, model=MINILM, input=[words, " ".join(words.split()[:150])])
    assert (ends[0] @ ends[1]) > (ends[0] @ starts[1]) and (starts[0] @ starts[1]) > (starts[0] @ ends[1])


def test_normalize_false_and_its_refusals(client):
    raw = _vectors(client, model=MINILM, input=TEXTS[:4], normalize=False)
    unit = _vectors(client, model=MINILM, input=TEXTS[:4])
    assert np.linalg.norm(raw, axis=1).min() > 1.5
    assert_same_vectors(raw / np.linalg.norm(raw, axis=1, keepdims=True), unit)
    cut = _vectors(client, model=MINILM, input=TEXTS[:4], normalize=False, dimensions=64)
    assert_same_vectors(cut, raw[:, :64])  # raw vectors are cut, not re-normalized
    assert _error(client, "/v1/embeddings", model=TINY_SPLADE, input="a", normalize=True)["param"] == "normalize"


def test_instruction_refusals(client):
    assert (
        _error(client, "/v1/embeddings", model=QWEN3_EMBEDDER, input="a", instruction="x", prompt_name="query")["param"]
        == "instruction"
    )
    assert (
        _error(client, "/v1/rerank", model=TINY_RERANKER, query="q", documents=["a"], instruction="x")["param"]
        == "instruction"
    )
    too_long = "x" * (EmbentoConfig().max_item_chars + 1)  # the instruction is tokenized on the event loop
    assert (
        _error(client, "/v1/embeddings", model=QWEN3_EMBEDDER, input="a", instruction=too_long)["param"]
        == "instruction"
    )
    assert (
        _error(client, "/v1/rerank", model=QWEN3_RERANKER, query="q", documents=["a"], instruction=too_long)["param"]
        == "instruction"
    )
