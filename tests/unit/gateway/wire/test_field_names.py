"""Every route's errors name the fields of its own client family, never another's: one table per route of bodies
refused by the validation layer or the tokenizer, through the real engine over a fake model service
(`fake_engine.py`), each with the field (`param`) and the place in the body the message starts with. Media inputs
that cannot be loaded need a media model's processor: tests/server/test_errors.py sends those."""

from __future__ import annotations

import pytest

from gateway.wire import cohere, infinity, openai, tei, voyage
from gateway.wire.common import RerankRequest
from tests.unit.gateway.fake_engine import CLASSIFIER, EMBEDDER, answer, assert_refused

TOO_MANY = ["a"] * 2049  # one over max_client_batch_size's default
LONG = " ".join(["word"] * 400)  # over MiniLM's 256 tokens


def _cases(*cases: tuple[str, dict, str, str]) -> list:
    return [pytest.param(body, param, where, id=name) for name, body, param, where in cases]


OPENAI = _cases(
    ("empty", {"input": []}, "input", "input must not be empty"),
    ("too-many", {"input": TOO_MANY}, "input", "input holds 2049 items"),
    ("empty-item", {"input": ["a", ""]}, "input", "input[1] is empty"),
    ("dimensions", {"input": "a", "dimensions": -1}, "dimensions", "dimensions must be between"),
    ("too-long", {"input": ["a", LONG], "truncate": False}, "input", "input[1] is "),
    ("token-ids-outside", {"input": [[1, 10**9]]}, "input", "input[0] holds token id"),
)
COHERE_V1 = _cases(
    ("empty", {"texts": []}, "texts", "texts must not be empty"),
    ("too-many", {"texts": TOO_MANY}, "texts", "texts holds 2049 items"),
    ("empty-item", {"texts": ["a", ""]}, "texts", "texts[1] is empty"),
    ("too-long", {"texts": ["a", LONG], "truncate": "NONE"}, "texts", "texts[1] is "),
    ("empty-images", {"images": []}, "images", "images must not be empty"),
)
COHERE_V2 = _cases(
    ("empty", {"texts": []}, "texts", "texts must not be empty"),
    ("output-dimension", {"texts": ["a"], "output_dimension": -1}, "output_dimension", "output_dimension must be"),
    ("empty-inputs", {"inputs": []}, "inputs", "inputs must not be empty"),
    ("empty-part", {"inputs": [{"content": [{"type": "text", "text": ""}]}]}, "inputs", "inputs[0] is empty"),
    ("too-long", {"texts": [LONG], "truncate": "NONE"}, "texts", "texts[0] is "),
)
TEI_EMBED = _cases(
    ("empty", {"inputs": []}, "inputs", "inputs must not be empty"),
    ("too-many", {"inputs": TOO_MANY}, "inputs", "inputs holds 2049 items"),
    ("empty-item", {"inputs": ["a", ""]}, "inputs", "inputs[1] is empty"),
    ("dimensions", {"inputs": "a", "dimensions": -1}, "dimensions", "dimensions must be between"),
    ("too-long", {"inputs": ["a", LONG], "truncate": False}, "inputs", "inputs[1] is "),
    ("token-ids-outside", {"inputs": [1, 10**9]}, "inputs", "inputs[0] holds token id"),
)
TEI_SIMILARITY = _cases(
    ("empty-source", {"inputs": {"source_sentence": "", "sentences": ["a"]}}, "inputs", "inputs.source_sentence is"),
    ("empty-sentence", {"inputs": {"source_sentence": "a", "sentences": ["b", ""]}}, "inputs", "inputs.sentences[1]"),
    (
        "too-long",
        {"inputs": {"source_sentence": "a", "sentences": [LONG]}, "parameters": {"truncate": False}},
        "inputs",
        "inputs.sentences[0] is ",
    ),
)
TEI_RERANK = _cases(
    ("empty", {"query": "q", "texts": []}, "texts", "texts must not be empty"),
    ("too-long", {"query": "q", "texts": ["a", LONG], "truncate": False}, "texts", "texts[1] makes a pair"),
)
TEI_PREDICT = _cases(
    ("too-long", {"inputs": [["a"], [LONG]], "truncate": False, "model": CLASSIFIER}, "inputs", "inputs[1] is "),
)
VOYAGE_CONTEXTUALIZED = _cases(
    ("empty", {"inputs": []}, "inputs", "inputs must not be empty"),
    ("output-dimension", {"inputs": [["a"]], "output_dimension": -1}, "output_dimension", "output_dimension must"),
)
VOYAGE_MULTIMODAL = _cases(
    (
        "output-dimension",
        {"inputs": [{"content": [{"type": "text", "text": "a"}]}], "output_dimension": 0},
        "output_dimension",
        "output_dimension must",
    ),
    ("empty-part", {"inputs": [{"content": [{"type": "text", "text": ""}]}]}, "inputs", "inputs[0] is empty"),
)
INFINITY_RERANK = _cases(
    ("empty", {"query": "q", "documents": []}, "documents", "documents must not be empty"),
    ("too-long", {"query": "q", "documents": ["a", LONG], "truncate": False}, "documents", "documents[1] makes a pair"),
)


def _refused(serve, route, body_model, body: dict, param: str, where: str) -> None:
    message = assert_refused(answer(serve, route, body_model, body), 400, param)
    assert message.startswith(where), message


@pytest.mark.parametrize(("body", "param", "where"), OPENAI)
def test_openai_embeddings(serve, body, param, where):
    _refused(serve, openai.embed, openai.EmbeddingRequest, body, param, where)


@pytest.mark.parametrize(("body", "param", "where"), COHERE_V1)
def test_cohere_embed_v1(serve, body, param, where):
    _refused(serve, cohere.embed_v1, cohere.CohereEmbedRequest, body, param, where)


@pytest.mark.parametrize(("body", "param", "where"), COHERE_V2)
def test_cohere_embed_v2(serve, body, param, where):
    _refused(serve, cohere.embed_v2, cohere.CohereV2EmbedRequest, {"model": EMBEDDER, **body}, param, where)


@pytest.mark.parametrize(("body", "param", "where"), TEI_EMBED)
def test_tei_embed(serve, body, param, where):
    _refused(serve, tei.embed, tei.TeiEmbedRequest, body, param, where)


@pytest.mark.parametrize(("body", "param", "where"), TEI_SIMILARITY)
def test_tei_similarity(serve, body, param, where):
    _refused(serve, tei.similarity, tei.TeiSimilarityRequest, body, param, where)


@pytest.mark.parametrize(("body", "param", "where"), TEI_RERANK)
def test_tei_rerank(serve, body, param, where):
    _refused(serve, tei.rerank, tei.TeiRerankRequest, body, param, where)


@pytest.mark.parametrize(("body", "param", "where"), TEI_PREDICT)
def test_tei_predict(serve, body, param, where):
    _refused(serve, tei.predict, tei.TeiPredictRequest, body, param, where)


@pytest.mark.parametrize(("body", "param", "where"), VOYAGE_CONTEXTUALIZED)
def test_voyage_contextualized(serve, body, param, where):
    _refused(serve, voyage.contextualized, voyage.ContextualizedRequest, body, param, where)


@pytest.mark.parametrize(("body", "param", "where"), VOYAGE_MULTIMODAL)
def test_voyage_multimodal(serve, body, param, where):
    _refused(serve, voyage.multimodal, voyage.MultimodalRequest, body, param, where)


@pytest.mark.parametrize(("body", "param", "where"), INFINITY_RERANK)
def test_infinity_rerank(serve, body, param, where):
    _refused(serve, infinity.rerank, RerankRequest, body, param, where)
