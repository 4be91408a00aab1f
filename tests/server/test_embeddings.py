"""The running server against direct sentence-transformers / transformers computations."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import numpy as np
import pytest

from testkit.sentences import make_sentences
from tests.conftest import (
    MINILM,
    MINILM_CLASSIFIER,
    MINILM_RERANKER,
    QWEN3_EMBEDDER,
    QWEN3_RERANKER,
    QWEN3_RERANKER_PLAIN,
    TINY_CLAP,
    TINY_CLASSIFIER,
    TINY_CLIP,
    TINY_CLS,
    TINY_COLMODERNVBERT,
    TINY_COLPALI,
    TINY_MEAN,
    TINY_MEAN_CT2,
    TINY_MEAN_ONNX,
    TINY_RERANKER,
    TINY_SPLADE,
)
from tests.references import transformers_embeddings
from tests.tolerance import assert_close, assert_same_vectors

pytestmark = pytest.mark.server


def embed(client: httpx.Client, **body) -> dict:
    response = client.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def vectors(payload: dict) -> np.ndarray:
    rows = sorted(payload["data"], key=lambda d: d["index"])
    return np.array([row["embedding"] for row in rows], dtype=np.float32)


def decode_base64(payload: dict) -> np.ndarray:
    rows = sorted(payload["data"], key=lambda d: d["index"])
    return np.stack([np.frombuffer(base64.b64decode(row["embedding"]), dtype="<f4") for row in rows])


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return make_sentences()


@pytest.fixture(scope="module")
def reference(minilm_path: Path, sentences: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu").encode(sentences, convert_to_numpy=True)


def test_parity_with_sentence_transformers(client, sentences, reference):
    payload = embed(client, input=sentences, model=MINILM)
    got = vectors(payload)
    assert payload["object"] == "list" and payload["model"] == MINILM
    assert [d["index"] for d in payload["data"]] == list(range(len(sentences)))
    assert all(d["object"] == "embedding" for d in payload["data"])
    cosines = (got * reference).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
    assert cosines.min() >= 0.9999, cosines.min()


def test_a_request_as_large_as_the_client_batch_limit_is_answered(client, sentences, reference):
    """2,048 inputs: the model service's answer lists 2,048 array sizes in one header, past aiohttp's
    default limit of 8,190 bytes (bento/serving/patches.py)."""
    from config.settings import EmbentoConfig

    count = EmbentoConfig().max_client_batch_size
    short = [i for i, sentence in enumerate(sentences) if len(sentence.split()) <= 8]  # the header is the point
    chosen = [short[i % len(short)] for i in range(count)]
    got = vectors(embed(client, input=[sentences[i] for i in chosen], model=MINILM))
    assert got.shape == (count, reference.shape[1])
    assert_same_vectors(got, reference[chosen], min_cosine=0.9999)


def test_usage_counts_real_tokens(client, minilm_path, sentences):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path))
    expected = sum(len(ids) for ids in tokenizer(sentences, truncation=True, max_length=256)["input_ids"])
    usage = embed(client, input=sentences, model=MINILM)["usage"]
    assert usage == {"prompt_tokens": expected, "total_tokens": expected}


def test_base64_equals_float(client, sentences):
    floats = vectors(embed(client, input=sentences[:10], model=MINILM))
    decoded = decode_base64(embed(client, input=sentences[:10], model=MINILM, encoding_format="base64"))
    np.testing.assert_array_equal(decoded, floats)


def test_token_ids_equal_text(client, minilm_path, sentences):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path))
    texts = sentences[:5] + sentences[-2:]  # the last ones are longer than the model's 256 tokens
    with_specials = tokenizer(texts)["input_ids"]
    without_specials = tokenizer(texts, add_special_tokens=False)["input_ids"]
    from_text = embed(client, input=texts, model=MINILM)
    for ids in (with_specials, without_specials):
        from_ids = embed(client, input=ids, model=MINILM)
        assert_same_vectors(vectors(from_ids), vectors(from_text))
        assert from_ids["usage"] == from_text["usage"]
    single = embed(client, input=with_specials[0], model=MINILM)
    assert_same_vectors(vectors(single)[0], vectors(from_text)[0])


def test_dimensions_is_renormalized_prefix(client, sentences):
    full = vectors(embed(client, input=sentences[:8], model=MINILM))
    short = vectors(embed(client, input=sentences[:8], model=MINILM, dimensions=128))
    prefix = full[:, :128] / np.linalg.norm(full[:, :128], axis=1, keepdims=True)
    assert short.shape == (8, 128)
    assert_same_vectors(short, prefix)
    assert_close(np.linalg.norm(short, axis=1), np.ones(len(short)))


def test_string_input_and_default_model(client, sentences, reference):
    payload = client.post("/v1/embeddings", json={"input": sentences[3]}).json()
    assert payload["model"] == MINILM
    assert_same_vectors(vectors(payload)[0], reference[3])


def test_infinity_path_and_fields(client, sentences, reference):
    response = client.post(
        "/embeddings", json={"input": [sentences[0]], "model": MINILM, "modality": "text", "user": "someone"}
    )
    assert response.status_code == 200
    assert_same_vectors(vectors(response.json())[0], reference[0])


@pytest.mark.parametrize("name, pooling, normalize", [(TINY_MEAN, "mean", True), (TINY_CLS, "cls", False)])
def test_tiny_bert_variants_are_routed_by_model(client, tiny_bert_path, sentences, name, pooling, normalize):
    texts = sentences[:12]
    payload = embed(client, input=texts, model=name)
    assert payload["model"] == name
    expected = transformers_embeddings(tiny_bert_path, texts, pooling, normalize)
    assert_same_vectors(vectors(payload), expected)


def test_models_list(client):
    response = client.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    cards = {card["id"]: card for card in body["data"]}
    assert body["object"] == "list" and set(cards) == {
        MINILM,
        TINY_MEAN,
        TINY_CLS,
        TINY_MEAN_ONNX,
        TINY_MEAN_CT2,
        TINY_RERANKER,
        TINY_CLASSIFIER,
        TINY_CLIP,
        TINY_CLAP,
        TINY_COLPALI,
        TINY_COLMODERNVBERT,
        MINILM_RERANKER,
        MINILM_CLASSIFIER,
        QWEN3_EMBEDDER,
        QWEN3_RERANKER,
        QWEN3_RERANKER_PLAIN,
        TINY_SPLADE,
    }
    assert [cards[n]["backend"] for n in (TINY_MEAN, TINY_MEAN_ONNX, TINY_MEAN_CT2)] == ["torch", "onnx", "ctranslate2"]
    assert cards[TINY_CLIP]["modalities"] == ["text", "image"]
    assert cards[TINY_CLIP]["capabilities"] == ["embed", "rerank"]
    assert cards[TINY_CLAP]["modalities"] == ["text", "audio"] and not cards[TINY_CLAP]["multi_vector"]
    for page_retriever in (TINY_COLPALI, TINY_COLMODERNVBERT):
        assert cards[page_retriever]["multi_vector"] and cards[page_retriever]["dimension"] == 16
    assert cards[MINILM]["dimension"] == 384 and cards[MINILM]["max_input_tokens"] == 256
    assert cards[TINY_MEAN]["dimension"] == 32 and cards[TINY_MEAN]["max_input_tokens"] == 512
    embedders = [cards[name] for name in (MINILM, TINY_MEAN, TINY_CLS)]
    assert all(
        c["object"] == "model" and c["modalities"] == ["text"] and c["capabilities"] == ["embed"] for c in embedders
    )
    # `backend: auto` (the default): ONNX Runtime where the export matches, torch where it cannot run
    assert [
        (cards[n]["backend"], cards[n]["backend_reason"].split(" (")[0]) for n in (MINILM, TINY_MEAN, TINY_CLIP)
    ] == [
        ("onnx", "onnx: its export matches torch"),
        ("torch", "configured"),
        ("torch", "torch: ONNX Runtime does not run clip models here"),
    ]
    assert client.get("/models").json() == body


def test_health_routes(client):
    assert client.get("/readyz").status_code == 200
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["unix"] > 0
    assert client.get("/livez").status_code == 200


def test_openai_sdk(server, sentences, reference):
    from openai import OpenAI

    sdk = OpenAI(base_url=f"{server}/v1", api_key="unused")
    default_mode = sdk.embeddings.create(input=sentences[:4], model=MINILM)  # the SDK asks for base64
    assert_same_vectors(np.array([d.embedding for d in default_mode.data]), reference[:4])
    as_float = sdk.embeddings.create(input=sentences[5], model=MINILM, encoding_format="float")
    assert_same_vectors(as_float.data[0].embedding, reference[5])
    as_base64 = sdk.embeddings.create(input=[sentences[6]], model=MINILM, encoding_format="base64")
    decoded = np.frombuffer(base64.b64decode(as_base64.data[0].embedding), dtype="<f4")
    assert_same_vectors(decoded, reference[6])
    assert default_mode.usage.prompt_tokens > 0 and default_mode.model == MINILM
    short = sdk.embeddings.create(input=sentences[:2], model=MINILM, dimensions=64)
    assert len(short.data[0].embedding) == 64


def test_bentoml_sync_client(server, sentences, reference):
    import bentoml

    with bentoml.SyncHTTPClient(server) as bento:
        result = bento.embeddings({"input": sentences[:3], "model": MINILM})
    got = np.array([row["embedding"] for row in result["data"]])
    assert_same_vectors(got, reference[:3])


def test_usage_tracking_and_tracing_are_off_in_every_server_process(server_process):
    import psutil

    _, pid = server_process
    workers = psutil.Process(pid).children(recursive=True)
    assert len(workers) >= 2  # the gateway and the TextEmbedder
    for process in workers:
        assert process.environ().get("BENTOML_DO_NOT_TRACK") == "True", process.cmdline()
        assert process.environ().get("OTEL_SDK_DISABLED") == "true", process.cmdline()  # `tracing: false`


def test_one_checkpoint_three_backends(client, tiny_bert_path):
    texts = make_sentences(12, seed=31)  # long ones included
    names = (TINY_MEAN, TINY_MEAN_ONNX, TINY_MEAN_CT2)
    by_backend = [vectors(embed(client, input=texts, model=name)) for name in names]
    expected = transformers_embeddings(tiny_bert_path, texts, "mean", True)
    for got in by_backend:
        cosines = (got * expected).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
        assert cosines.min() >= 0.9999
