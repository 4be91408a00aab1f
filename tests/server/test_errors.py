"""Bad input: each a 4xx in OpenAI's error shape, and the server still healthy afterwards."""

from __future__ import annotations

import json

import httpx
import pytest

from testkit.media import IMAGES, data_uri
from tests.asserts import assert_healthy, assert_openai_error
from tests.conftest import MINILM, TINY_CLIP

pytestmark = pytest.mark.server

# The whole matrix of bad bodies runs against the engine, without a server (tests/unit/gateway/wire/).
# Here, one refused by the body model (BentoML's parsing) and one by the engine's checks, each in OpenAI's shape.
BAD_BODIES = [
    pytest.param({"input": [1.5, 2], "model": MINILM}, 400, "input", id="float-items"),
    pytest.param({"input": "x", "model": MINILM, "dimensions": 385}, 400, "dimensions", id="dimensions-too-large"),
]


@pytest.mark.parametrize("body, status, param", BAD_BODIES)
def test_bad_body(client, body, status, param):
    assert_openai_error(client.post("/v1/embeddings", json=body), status, param)


def test_unknown_model_lists_served_names(client):
    error = assert_openai_error(client.post("/v1/embeddings", json={"input": "x", "model": "gpt-x"}), 404, "model")
    assert MINILM in error["message"] and error["code"] == "model_not_found"


def test_body_over_the_32_mib_default(client):
    body = json.dumps({"input": "a" * (33 * 1024 * 1024), "model": MINILM})
    response = client.post("/v1/embeddings", content=body, headers={"content-type": "application/json"})
    assert_openai_error(response, 413)
    assert_healthy(client)


def test_chunked_body_over_the_limit(client):
    def chunks():
        yield b'{"input": "'
        for _ in range(33):
            yield b"a" * (1024 * 1024)
        yield b'"}'

    response = client.post("/v1/embeddings", content=chunks(), headers={"content-type": "application/json"})
    assert_openai_error(response, 413)


def test_invalid_json(client):
    response = client.post("/v1/embeddings", content=b'{"input": ["a",', headers={"content-type": "application/json"})
    error = assert_openai_error(response, 400)
    assert "JSON" in error["message"]


# Bodies BentoML cannot read, each told what is wrong with it (never quoting it), in the route's own shape.
UNREADABLE_BODIES = [
    pytest.param(b"", "the request body is empty", id="empty"),
    pytest.param(b'\xef\xbb\xbf{"input": "private words"}', "byte order mark", id="utf-8-bom"),
    pytest.param(b'{"input": "private \\ud800 words"}', "surrogate", id="lone-surrogate"),
    pytest.param(b'{"input": "private \xff words"}', "not valid UTF-8", id="not-utf-8"),
]


@pytest.mark.parametrize("body, says", UNREADABLE_BODIES)
def test_an_unreadable_body_is_told_what_is_wrong_with_it(client, body, says):
    headers = {"content-type": "application/json"}
    error = assert_openai_error(client.post("/v1/embeddings", content=body, headers=headers), 400)
    assert says in error["message"] and "private" not in error["message"], error
    tei = client.post("/embed", content=body.replace(b'"input"', b'"inputs"'), headers=headers)
    assert tei.status_code == 400 and says in tei.json()["error"], tei.text


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_wrong_content_type(client, content_type):
    response = client.post("/v1/embeddings", content=b'{"input": "x"}', headers={"content-type": content_type})
    assert_openai_error(response, 415)


def test_unknown_route_and_method(client):
    assert_openai_error(client.get("/v1/nothing-here"), 404)
    assert_openai_error(client.get("/v1/embeddings"), 405)


def test_server_healthy_after_everything(client):
    for body, _, _ in (p.values for p in BAD_BODIES):
        client.post("/v1/embeddings", json=body)
    assert_healthy(client)
    assert client.get("/health").status_code == 200


def test_info_lists_the_limits_in_force(client):
    from config.settings import EmbentoConfig
    from gateway.http.get_routes import LIMIT_FIELDS
    from models.batching import pass_budget_ms
    from tests.conftest import MAX_AUDIO_SECONDS, TINY_MEAN

    info = client.get("/info").json()
    expected = EmbentoConfig(max_audio_seconds=MAX_AUDIO_SECONDS)  # the test server's only change to a limit
    assert info["limits"] == {name: getattr(expected, name) for name in LIMIT_FIELDS}
    models = {m["id"]: m for m in info["models"]}
    minilm = models[MINILM]
    assert set(minilm) == {"id", "kind", "device", "batch_size", "max_batch_tokens", "pass_budget_ms"}
    assert minilm["kind"] == "embed"
    assert (minilm["batch_size"], minilm["max_batch_tokens"]) == device_limits(minilm)  # unconfigured
    assert minilm["pass_budget_ms"] == pass_budget_ms(None, minilm["device"])  # the device's: 30 on CPU, 10 on a GPU
    assert models[TINY_MEAN]["kind"] == "embed" and len(models) == 17


def device_limits(model: dict) -> tuple[int, int]:
    """The pass limits an unconfigured model gets on the device `auto` chose, the first GPU if there is one
    (models/batching.py): on CPU, 32 inputs and 16,384 tokens; on a GPU, the tokens whose activations fit a
    share of its free memory (within bounds), and rows for inputs of 64 tokens."""
    import torch

    from models.batching import CPU_LIMITS, GPU_MAX_LIMITS, GPU_MIN_BATCH_TOKENS, TOKENS_PER_ROW

    if not torch.cuda.is_available():
        assert model["device"] == "cpu", model
        return CPU_LIMITS.batch_size, CPU_LIMITS.max_batch_tokens
    assert model["device"].startswith("cuda"), model
    tokens = model["max_batch_tokens"]
    assert GPU_MIN_BATCH_TOKENS <= tokens <= GPU_MAX_LIMITS.max_batch_tokens, model
    return max(CPU_LIMITS.batch_size, min(GPU_MAX_LIMITS.batch_size, tokens // TOKENS_PER_ROW)), tokens


def test_a_typed_item_with_an_unknown_key_is_told_the_key(client):
    body = {"input": [{"text": "private words"}, {"text": "private words", "foo": 1}], "model": MINILM}
    error = assert_openai_error(client.post("/v1/embeddings", json=body), 400, "input")
    assert "input[1]" in error["message"] and "'foo'" in error["message"] and "private" not in error["message"]


BAD_BASE64 = "data:image/png;base64,@@@@"
NOT_AN_IMAGE = "data:image/png;base64,aGVsbG8gdGhlcmU="  # "hello there": valid base64, no image
IMAGE = data_uri(*IMAGES["png"])
# A media input that cannot be loaded, named by the field its family sent it in (`param` where the shape has one).
UNLOADABLE_MEDIA = [
    pytest.param("/v1/embeddings", {"input": [{"image": BAD_BASE64}]}, "input", "input[0]", id="openai"),
    pytest.param("/v1/embed", {"images": [IMAGE, BAD_BASE64]}, "images", "images[1]", id="cohere-v1"),
    pytest.param(
        "/v2/embed",
        {"inputs": [{"content": [{"type": "image_url", "image_url": {"url": BAD_BASE64}}]}]},
        "inputs",
        "inputs[0]",
        id="cohere-v2",
    ),
    pytest.param(
        "/v1/multimodalembeddings",
        {"inputs": [{"content": [{"type": "image_base64", "image_base64": BAD_BASE64}]}]},
        None,
        "inputs[0]",
        id="voyage",
    ),
    pytest.param(
        "/v1/rerank", {"query": "q", "documents": [{"image": BAD_BASE64}]}, "documents", "documents[0]", id="jina"
    ),
]


def media_error(response: httpx.Response, param: str | None) -> dict:
    """The error's message and param, in its route's shape (Voyage's has no param)."""
    assert response.status_code == 400, response.text
    return response.json()["error"] if param is not None else {"message": response.json()["detail"], "param": None}


@pytest.mark.parametrize("path, body, param, where", UNLOADABLE_MEDIA)
def test_a_media_input_that_cannot_be_loaded_is_named_by_its_familys_field(client, path, body, param, where):
    error = media_error(client.post(path, json={"model": TINY_CLIP, **body}), param)
    assert error["message"].startswith(f"{where} holds invalid base64") and error["param"] == param, error


@pytest.mark.parametrize("path, body, param, where", UNLOADABLE_MEDIA)
def test_bytes_that_are_no_image_are_named_by_their_familys_field(client, path, body, param, where):
    """Loaded, then refused by the image decoder (in the model's processor): named as the loading errors are."""
    not_an_image = json.loads(json.dumps(body).replace(BAD_BASE64, NOT_AN_IMAGE))
    error = media_error(client.post(path, json={"model": TINY_CLIP, **not_an_image}), param)
    assert error["message"].startswith(f"{where} is not a readable image") and error["param"] == param, error
