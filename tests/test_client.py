"""The typed client (`embento.Client`) against the running server, every method."""

from __future__ import annotations

import numpy as np
import pytest

from embento import Client, EmbentoClientError
from tests.conftest import (
    CLASSIFIER_LABELS,
    MINILM,
    TINY_CLAP,
    TINY_CLASSIFIER,
    TINY_CLIP,
    TINY_COLPALI,
    TINY_RERANKER,
)
from tests.media import AUDIO, IMAGES, data_uri

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
    np.testing.assert_allclose(vectors, _floats(client, {"input": ["a sentence", "another one"], "model": MINILM}),
                               atol=1e-6)
    assert embento.embed(["a sentence"], model=MINILM, dimensions=64).shape == (1, 64)


def test_embed_images_and_audio(embento, client, tmp_path):
    path = tmp_path / "page.jpg"
    path.write_bytes(IMAGES["jpeg"][0])
    images = embento.embed_images([IMAGES["png"][0], path], model=TINY_CLIP)
    assert images.shape == (2, 16)
    pages = embento.embed_images([IMAGES["png"][0]], model=TINY_COLPALI)
    assert isinstance(pages, list) and pages[0].ndim == 2 and pages[0].shape[1] == 16
    expected = _floats(client, {"input": [{"image": data_uri(*IMAGES["png"])}],
                                "model": TINY_COLPALI})[0]
    np.testing.assert_allclose(pages[0], expected, atol=1e-6)
    clips = embento.embed_audio([AUDIO["wav-16k-mono"][0], AUDIO["flac-44k-mono"][0]], model=TINY_CLAP)
    assert clips.shape == (2, 16)


def test_rerank_and_classify(embento):
    ranking = embento.rerank("how to keep data private", ["own machines", "a public cloud", "a diary"],
                             model=TINY_RERANKER, top_n=2)
    assert len(ranking) == 2 and ranking[0][1] >= ranking[1][1]
    labels = embento.classify(["good", "bad"], model=TINY_CLASSIFIER)
    assert [sorted(row) for row in labels] == [sorted(CLASSIFIER_LABELS)] * 2
    assert abs(sum(labels[0].values()) - 1) < 1e-5


def test_errors_are_exceptions_with_the_servers_message(embento):
    with pytest.raises(EmbentoClientError) as caught:
        embento.embed(["x"], model="no-such-model")
    assert caught.value.status == 404 and "no-such-model" in caught.value.message
