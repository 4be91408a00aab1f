"""The typed client (`embento.Client`) against the running server, every method."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest

from embento import Client, EmbentoClientError
from testkit.media import AUDIO, IMAGES, data_uri
from tests.conftest import (
    CLASSIFIER_LABELS,
    MINILM,
    ROOT,
    TINY_CLAP,
    TINY_CLASSIFIER,
    TINY_CLIP,
    TINY_COLPALI,
    TINY_RERANKER,
    TINY_SPLADE,
)
from tests.tolerance import assert_close, assert_same_vectors

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def embento(server):
    with Client(server) as client:
        yield client


def _floats(client, body: dict) -> list:
    return [item["embedding"] for item in client.post("/v1/embeddings", json=body).json()["data"]]


def test_embed(embento, client):
    vectors = embento.embed(["a sentence", "another one"], model=MINILM)
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    assert_same_vectors(vectors, _floats(client, {"input": ["a sentence", "another one"], "model": MINILM}))
    assert embento.embed(["a sentence"], model=MINILM, dimensions=64).shape == (1, 64)


def test_embed_images_and_audio(embento, client, tmp_path):
    path = tmp_path / "page.jpg"
    path.write_bytes(IMAGES["jpeg"][0])
    images = embento.embed_images([IMAGES["png"][0], path], model=TINY_CLIP)
    assert images.shape == (2, 16)
    pages = embento.embed_images([IMAGES["png"][0]], model=TINY_COLPALI)
    assert isinstance(pages, list) and pages[0].ndim == 2 and pages[0].shape[1] == 16
    expected = _floats(client, {"input": [{"image": data_uri(*IMAGES["png"])}], "model": TINY_COLPALI})[0]
    assert_same_vectors(pages[0], expected)
    clips = embento.embed_audio([AUDIO["wav-16k-mono"][0], AUDIO["flac-44k-mono"][0]], model=TINY_CLAP)
    assert clips.shape == (2, 16)


def test_rerank_and_classify(embento):
    ranking = embento.rerank(
        "how to keep data private", ["own machines", "a public cloud", "a diary"], model=TINY_RERANKER, top_n=2
    )
    assert len(ranking) == 2 and ranking[0][1] >= ranking[1][1]
    labels = embento.classify(["good", "bad"], model=TINY_CLASSIFIER)
    assert [sorted(row) for row in labels] == [sorted(CLASSIFIER_LABELS)] * 2
    assert abs(sum(labels[0].values()) - 1) < 1e-5


def test_errors_are_exceptions_with_the_servers_message(embento):
    with pytest.raises(EmbentoClientError) as caught:
        embento.embed(["x"], model="no-such-model")
    assert caught.value.status == 404 and "no-such-model" in caught.value.message


# One valid body per POST endpoint of the gateway, keyed by BentoML client method name.
ENDPOINT_BODIES = {
    "embeddings": {"input": ["a sentence"], "model": MINILM},
    "embeddings_unversioned": {"input": "a sentence", "model": MINILM, "encoding_format": "base64"},
    "embeddings_image": {"input": [data_uri(*IMAGES["png"])], "model": TINY_CLIP},
    "embeddings_audio": {"input": [data_uri(*AUDIO["wav-16k-mono"])], "model": TINY_CLAP},
    "rerank": {"query": "q", "documents": ["a", "b"], "model": TINY_RERANKER, "return_documents": True},
    "rerank_v1": {"query": "q", "documents": ["a", {"text": "b"}], "model": TINY_RERANKER},
    "rerank_v2": {"query": "q", "documents": ["a", "b"], "model": TINY_RERANKER},
    "classify": {"input": ["good"], "model": TINY_CLASSIFIER},
    "classify_unversioned": {"input": "bad", "model": TINY_CLASSIFIER, "raw_scores": True},
    "embed_sparse": {"inputs": ["a sentence"], "model": TINY_SPLADE, "max_active_dims": 8},
    "cohere_embed_v1": {"texts": ["a sentence"], "model": MINILM, "embedding_types": ["float", "ubinary"]},
    "cohere_embed_v2": {"texts": ["a sentence"], "model": MINILM, "input_type": "search_query"},
    "tei_embed": {"inputs": "a sentence"},
    "tei_predict": {"inputs": [["good"], ["bad", "worse"]], "model": TINY_CLASSIFIER},
    "tei_similarity": {"inputs": {"source_sentence": "a", "sentences": ["b", "c"]}},
    "tei_tokenize": {"inputs": ["a sentence"]},
    "tei_decode": {"ids": [[101, 1037, 102]]},
    "tei_root": {"inputs": "a sentence", "parameters": {"top_k": 1}},
    "contextualized_embeddings": {"inputs": [["a sentence", "and its neighbour"]], "model": MINILM},
    "multimodal_embeddings": {
        "inputs": [{"content": [{"type": "image_base64", "image_base64": data_uri(*IMAGES["png"])}]}],
        "model": TINY_CLIP,
    },
}
ID_FIELDS = ("id", "created")  # differ from call to call


def assert_same(got, expected, where: str = "") -> None:
    """Equal answers: numbers within float32 noise (batches differ between calls), base64 vectors decoded."""
    if isinstance(expected, dict):
        assert set(got) == set(expected), where
        for key in expected.keys() - set(ID_FIELDS):
            assert_same(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert len(got) == len(expected), where
        for index, (a, b) in enumerate(zip(got, expected)):
            assert_same(a, b, f"{where}[{index}]")
    elif isinstance(expected, float):
        assert_close(got, expected, err_msg=where)
    elif where.endswith(".embedding") and isinstance(expected, str):
        assert_same_vectors(_float32s(got), _float32s(expected), err_msg=where)
    else:
        assert got == expected, where


def test_bentoml_clients_call_every_post_endpoint(server, client):
    """`bentoml.SyncHTTPClient` and `AsyncHTTPClient` reach every POST endpoint and get what raw HTTP gets."""
    import asyncio

    import bentoml

    expected = {}
    with bentoml.SyncHTTPClient(server) as bento:
        assert set(bento.endpoints) == set(ENDPOINT_BODIES)
        for method, body in ENDPOINT_BODIES.items():
            response = client.post(bento.endpoints[method].route, json=body)
            assert response.status_code == 200, response.text
            expected[method] = response.json()
            assert_same(getattr(bento, method)(body), expected[method], method)

    async def concurrently() -> list[dict]:
        async with bentoml.AsyncHTTPClient(server) as bento:
            return await asyncio.gather(*(getattr(bento, method)(body) for method, body in ENDPOINT_BODIES.items()))

    for method, got in zip(ENDPOINT_BODIES, asyncio.run(concurrently())):
        assert_same(got, expected[method], method)


def _float32s(base64_text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(base64_text), dtype="<f4")


def test_the_bentoml_client_call_the_docs_show_first_works_and_the_readme_links_it(server):
    """BentoML 1.4's client takes these routes' bodies as one positional dict, not keywords (docs/api.md: BentoML
    client says why): the section's first example runs as written, and the README points there."""
    api = (ROOT / "docs" / "api.md").read_text()
    section = api[api.index("\n### BentoML client\n") :]
    example = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert example is not None
    namespace: dict = {}
    exec(example.group(1).replace("http://localhost:3000", server), namespace)  # the docs' own code
    assert len(namespace["result"]["data"]) == 1 and len(namespace["result"]["data"][0]["embedding"]) == 384
    assert "docs/api.md#bentoml-client" in (ROOT / "README.md").read_text()
    import bentoml

    with bentoml.SyncHTTPClient(server) as bento, pytest.raises(TypeError, match="one positional argument"):
        bento.embeddings(input=["a sentence"], model=MINILM)  # as the section says: if this passes, update it
