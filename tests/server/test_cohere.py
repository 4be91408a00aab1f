"""Cohere's embed, v1 and v2, through the real server with Cohere's own SDK: every embedding type; int8/uint8
codes by the default symmetric scheme (round(x / s * 127), s the scale GET /v1/models reports) equal to the
offline ones, and by the `per_dimension` option equal to sentence-transformers' `quantize_embeddings` with the
ranges GET /v1/models reports; codes that do not depend on the batch or on a restart, input types, and the
refusals; the same quantized types as OpenAI `encoding_format`s, through OpenAI's SDK."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import cohere
import httpx
import numpy as np
import pytest

from models.quantization import CALIBRATION_TEXTS, RANGE_GRID, Quantizer
from testkit.media import data_uri, image_bytes
from testkit.sentences import make_sentences
from tests.asserts import assert_openai_error
from tests.conftest import MINILM, QWEN3_EMBEDDER, TINY_CLIP, TINY_COLPALI, running_server
from tests.retrieval import SHORT_DOCUMENTS, SHORT_QUERIES
from tests.tolerance import assert_close, assert_same_vectors

pytestmark = pytest.mark.server
TEXTS = make_sentences(6, seed=11)
ALL_TYPES = ["float", "int8", "uint8", "binary", "ubinary", "base64"]


def _quantize(floats, precision: str, ranges=None) -> np.ndarray:
    from sentence_transformers.util.quantization import quantize_embeddings

    ranges = None if ranges is None else np.asarray(ranges, dtype=np.float32)
    return quantize_embeddings(np.asarray(floats, dtype=np.float32), precision, ranges=ranges)


def _symmetric(floats, precision: str, scale: float) -> np.ndarray:
    """The default scheme, written independently: round(x / s * 127) in [-127, 127]; uint8 the same + 128."""
    codes = np.clip(np.round(np.asarray(floats, dtype=np.float32).astype(np.float64) / scale * 127), -127, 127)
    return codes + 128 if precision == "uint8" else codes


def _report(client: httpx.Client, model: str) -> tuple[dict, int]:
    card = next(c for c in client.get("/v1/models").json()["data"] if c["id"] == model)
    return card["quantization"], card["dimension"]


def _scale(client: httpx.Client, model: str) -> float:
    """The model's symmetric scale for its full width, as GET /v1/models reports it (calibrated)."""
    report, dimension = _report(client, model)
    assert report["scheme"] == "symmetric" and report["source"] == "calibrated"
    assert report["calibration_texts"] > 50 and "ranges" not in report
    return report["scales"][str(dimension)]


def _ranges(client: httpx.Client, model: str) -> np.ndarray:
    """A `per_dimension` model's calibrated ranges for its full width, as GET /v1/models reports them."""
    report, dimension = _report(client, model)
    assert report["scheme"] == "per_dimension" and report["source"] == "calibrated"
    return np.asarray(report["ranges"][str(dimension)], dtype=np.float32)


@pytest.fixture(scope="module")
def minilm_st(minilm_path: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu", local_files_only=True)


@pytest.fixture(scope="module")
def co(server: str) -> cohere.Client:
    return cohere.Client(api_key="unused", base_url=server)


@pytest.fixture(scope="module")
def co2(server: str) -> cohere.ClientV2:
    return cohere.ClientV2(api_key="unused", base_url=server)


def _check_every_type(embeddings, scale: float, reference: np.ndarray) -> None:
    floats = np.asarray(embeddings.float_, dtype=np.float32)
    assert_same_vectors(floats, reference)
    for precision in ("int8", "uint8"):
        codes = np.asarray(getattr(embeddings, precision))
        assert codes.shape == floats.shape
        assert np.array_equal(codes, _symmetric(floats, precision, scale)), precision
    for precision in ("binary", "ubinary"):
        codes = np.asarray(getattr(embeddings, precision))
        assert codes.shape == (floats.shape[0], floats.shape[1] // 8)
        assert np.array_equal(codes, _quantize(floats, precision)), precision
    decoded = np.stack([np.frombuffer(base64.b64decode(b), dtype="<f4") for b in embeddings.base64])
    assert np.array_equal(decoded, floats)


def test_v1_every_embedding_type_equals_sentence_transformers(co, client, minilm_st):
    response = co.embed(texts=TEXTS, model=MINILM, embedding_types=ALL_TYPES, batching=False)
    assert response.response_type == "embeddings_by_type"
    assert response.texts == TEXTS and response.meta.api_version.version == "1"
    usage = client.post("/v1/embeddings", json={"model": MINILM, "input": TEXTS}).json()["usage"]
    assert response.meta.billed_units.input_tokens == usage["prompt_tokens"]
    _check_every_type(response.embeddings, _scale(client, MINILM), minilm_st.encode(TEXTS))


def test_v1_without_embedding_types_answers_floats(co, minilm_st):
    response = co.embed(texts=TEXTS[:2], model=MINILM, input_type="search_document")
    assert response.response_type == "embeddings_floats"
    assert_same_vectors(response.embeddings, minilm_st.encode(TEXTS[:2]))


def test_v2_every_embedding_type_and_inputs(co2, client, minilm_st):
    response = co2.embed(texts=TEXTS, model=MINILM, input_type="search_query", embedding_types=ALL_TYPES)
    assert response.meta.api_version.version == "2" and response.texts == TEXTS
    _check_every_type(response.embeddings, _scale(client, MINILM), minilm_st.encode(TEXTS))
    contents = co2.embed(
        model=MINILM,
        input_type="search_document",
        embedding_types=["float"],
        inputs=[{"content": [{"type": "text", "text": text}]} for text in TEXTS[:3]],
    )
    assert_same_vectors(contents.embeddings.float_, minilm_st.encode(TEXTS[:3]))


def test_v2_output_dimension_truncates_and_renormalizes_before_quantizing(co2, minilm_st):
    response = co2.embed(
        texts=TEXTS,
        model=MINILM,
        output_dimension=128,
        input_type="search_document",
        embedding_types=["float", "int8", "binary"],
    )
    full = minilm_st.encode(TEXTS)[:, :128]
    floats = np.asarray(response.embeddings.float_, dtype=np.float32)
    assert_same_vectors(floats, full / np.linalg.norm(full, axis=1, keepdims=True))
    assert_close(np.linalg.norm(floats, axis=1), np.ones(len(TEXTS)))
    assert np.array_equal(np.asarray(response.embeddings.binary), _quantize(floats, "binary"))
    int8 = np.asarray(response.embeddings.int8)
    assert int8.shape == (len(TEXTS), 128) and int8.min() >= -128 and int8.max() <= 127
    # the renormalized vector is longer per feature than the full one's first 128: its codes spread wider
    whole = co2.embed(texts=TEXTS, model=MINILM, input_type="search_document", embedding_types=["int8"])
    whole = np.asarray(whole.embeddings.int8)[:, :128]
    assert not np.array_equal(int8, whole)


def test_served_codes_are_the_offline_ones(co, co2, client, minilm_st):
    """The codes a vector database would store, from the server (Cohere v2 and v1), against the same codes made
    offline: sentence-transformers' vectors for the calibration texts and for part of the retrieval set of
    tests/unit/models/test_quantized_retrieval.py, through models/quantization.py with the default scheme."""
    texts = SHORT_QUERIES[:20] + SHORT_DOCUMENTS[:100]
    offline = Quantizer(calibration=minilm_st.encode(CALIBRATION_TEXTS))
    scale = _scale(client, MINILM)
    # equal, unless another processor's float noise carries the largest value across a grid step
    assert abs(offline.parameters(384, True) - scale) <= 1 / RANGE_GRID
    served = co2.embed(
        texts=texts, model=MINILM, input_type="search_document", embedding_types=["float", "int8", "uint8"]
    ).embeddings
    floats = np.asarray(served.float_, dtype=np.float32)
    assert_same_vectors(floats, minilm_st.encode(texts))
    for precision in ("int8", "uint8"):
        codes = np.asarray(getattr(served, precision))
        assert np.array_equal(codes, _symmetric(floats, precision, scale)), precision
        expected = offline.codes(minilm_st.encode(texts), precision, renormalized=True).astype(int)
        # one step apart at most, where the two float outputs sit either side of a rounding boundary
        assert (np.abs(codes - expected) <= 1).all() and (codes == expected).mean() > 0.99, precision
    assert np.array_equal(np.asarray(served.uint8), np.asarray(served.int8) + 128)
    v1 = co.embed(texts=texts[:8], model=MINILM, embedding_types=["int8"], batching=False).embeddings.int8
    assert (np.abs(np.asarray(v1) - np.asarray(served.int8)[:8]) <= 1).all()


def _codes_agree(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray]) -> None:
    """int8 codes from fixed ranges: equal wherever the floats are; where float noise of a different batch
    moved a value, the code may move by one step, and only there."""
    (floats_a, codes_a), (floats_b, codes_b) = first, second
    moved = codes_a != codes_b
    assert (np.abs(codes_a.astype(int) - codes_b.astype(int)) <= 1).all()
    assert (floats_a[moved] != floats_b[moved]).all()
    assert moved.mean() < 0.01, moved.mean()


def _float_and_int8(base_url: str, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    body = {"model": MINILM, "texts": texts, "embedding_types": ["float", "int8"]}
    response = httpx.post(f"{base_url}/v2/embed", json=body, timeout=60)
    assert response.status_code == 200, response.text
    embeddings = response.json()["embeddings"]
    return np.asarray(embeddings["float"], dtype=np.float32), np.asarray(embeddings["int8"])


def test_int8_codes_do_not_depend_on_the_batch_or_a_restart(server, client, tmp_path_factory, minilm_path):
    text = "A self-hosted embedding server keeps data on our own machines."
    alone = _float_and_int8(server, [text])
    others = make_sentences(63, seed=3)
    in_batch = _float_and_int8(server, others[:20] + [text] + others[20:])
    _codes_agree(alone, (in_batch[0][20:21], in_batch[1][20:21]))
    # a batch of very different texts moves request-derived ranges a lot; fixed ones not at all (ranges from a
    # small batch: sentence-transformers 6 derives none from a single embedding)
    small = _float_and_int8(server, [text, *others[:2]])
    assert not np.array_equal(_quantize(small[0], "int8")[:1], _quantize(in_batch[0], "int8")[20:21])
    scale = _scale(client, MINILM)
    folder = tmp_path_factory.mktemp("restarted")
    # beside it, MiniLM again: with the per-dimension option, calibrated and configured (ranges narrower than
    # calibrated ones), and with a configured scale half the calibrated one
    narrow = np.vstack([np.full(384, -0.125), np.full(384, 0.125)])
    (folder / "ranges.json").write_text(json.dumps({"384": narrow.tolist()}))
    (folder / "scale.json").write_text(json.dumps({"384": scale / 2}))
    models = [
        {"model_id": MINILM},
        {"model_id": MINILM, "served_model_name": "per-dimension", "quantization": "per_dimension"},
        {
            "model_id": MINILM,
            "served_model_name": "configured",
            "quantization": "per_dimension",
            "quantization_ranges": str(folder / "ranges.json"),
        },
        {
            "model_id": MINILM,
            "served_model_name": "configured-scale",
            "quantization_ranges": str(folder / "scale.json"),
        },
    ]
    with running_server(folder, {"models": models, "cache_dir": str(folder / "cache")}) as (url, _):
        with httpx.Client(base_url=url, timeout=60) as other:
            assert _scale(other, MINILM) == scale
            body = {"texts": TEXTS + [text], "embedding_types": ["float", "int8", "uint8"]}
            # the per-dimension option: sentence-transformers' codes, bit for bit, with the ranges reported
            ranges = _ranges(other, "per-dimension")
            option = other.post("/v2/embed", json={**body, "model": "per-dimension"}).json()["embeddings"]
            for precision in ("int8", "uint8"):
                assert np.array_equal(option[precision], _quantize(option["float"], precision, ranges)), precision
            report, _ = _report(other, "configured")
            assert report == {
                "scheme": "per_dimension",
                "source": "configured",
                "calibration_texts": None,
                "ranges": {"384": narrow.tolist()},
            }
            configured = other.post("/v2/embed", json={**body, "model": "configured"}).json()["embeddings"]
            assert np.array_equal(configured["int8"], _quantize(configured["float"], "int8", narrow))
            report, _ = _report(other, "configured-scale")
            assert report == {
                "scheme": "symmetric",
                "source": "configured",
                "calibration_texts": None,
                "scales": {"384": scale / 2},
            }
            halved = other.post("/v2/embed", json={**body, "model": "configured-scale"}).json()["embeddings"]
            assert np.array_equal(halved["int8"], _symmetric(halved["float"], "int8", scale / 2))
            cut = other.post("/v2/embed", json={**body, "model": "configured", "output_dimension": 64})
            assert_openai_error(cut, 400, "output_dimension")  # no ranges configured for 64 features
        _codes_agree(alone, _float_and_int8(url, [text]))


def test_input_type_picks_the_model_prompt(co2, qwen3_embedder_path):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(qwen3_embedder_path), device="cpu", local_files_only=True)
    queries = co2.embed(texts=TEXTS[:3], model=QWEN3_EMBEDDER, input_type="search_query", embedding_types=["float"])
    assert_same_vectors(queries.embeddings.float_, reference.encode(TEXTS[:3], prompt_name="query"))
    documents = co2.embed(
        texts=TEXTS[:3], model=QWEN3_EMBEDDER, input_type="search_document", embedding_types=["float"]
    )
    assert_same_vectors(documents.embeddings.float_, reference.encode(TEXTS[:3], prompt_name="document"))


def test_v2_images_for_a_clip_model(client):
    image = data_uri(image_bytes(40, 30, seed=5), "image/png")
    body = {"model": TINY_CLIP, "images": [image], "embedding_types": ["float", "ubinary"]}
    response = client.post("/v2/embed", json=body)
    assert response.status_code == 200, response.text
    by_type = response.json()["embeddings"]
    openai = client.post("/v1/embeddings", json={"model": TINY_CLIP, "input": [{"image": image}]}).json()
    assert_close(by_type["float"][0], openai["data"][0]["embedding"])
    assert np.array_equal(by_type["ubinary"], _quantize(by_type["float"], "ubinary"))
    mixed = {
        "model": TINY_CLIP,
        "embedding_types": ["float"],
        "inputs": [
            {"content": [{"type": "text", "text": "a red square"}]},
            {"content": [{"type": "image_url", "image_url": {"url": image}}]},
        ],
    }
    assert len(client.post("/v2/embed", json=mixed).json()["embeddings"]["float"]) == 2


# The refusals, each with the field it names, are tests/unit/gateway/wire/test_cohere.py's, through the engine;
# here one the framework makes and one the engine makes with a real model's facts.
@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v2/embed", {"texts": ["a"]}, "model"),
        ("/v2/embed", {"model": TINY_COLPALI, "texts": ["a"]}, "model"),  # multi-vector: no dense vector to give
    ],
)
def test_bad_cohere_requests_get_openai_shaped_errors(client, path, body, param):
    assert_openai_error(client.post(path, json=body), 400, param)


def test_openai_sdk_gets_the_same_codes_as_an_encoding_format(server, client):
    from openai import OpenAI

    sdk = OpenAI(base_url=f"{server}/v1", api_key="unused")
    floats = _float_and_int8(server, TEXTS)[0]
    scale = _scale(client, MINILM)
    for precision in ("int8", "uint8", "binary", "ubinary"):
        result = sdk.embeddings.create(input=TEXTS, model=MINILM, encoding_format=precision)  # type: ignore[arg-type]
        codes = np.asarray([item.embedding for item in result.data])
        expected = _symmetric(floats, precision, scale) if precision.endswith("int8") else _quantize(floats, precision)
        assert codes.shape == expected.shape
        if precision.endswith("int8"):
            assert (np.abs(codes - expected.astype(int)) <= 1).all() and (codes == expected).mean() > 0.99
        else:
            assert np.array_equal(codes, expected), precision
    cut = client.post(
        "/v1/embeddings", json={"model": MINILM, "input": TEXTS, "dimensions": 64, "encoding_format": "ubinary"}
    ).json()
    assert np.asarray(cut["data"][0]["embedding"]).shape == (8,)
    refused = client.post("/v1/embeddings", json={"model": TINY_COLPALI, "input": "a", "encoding_format": "binary"})
    assert_openai_error(refused, 400, "encoding_format")
