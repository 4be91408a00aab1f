"""Bad input: each a 4xx in OpenAI's error shape, and the server still healthy afterwards."""

from __future__ import annotations

import json

import pytest

from tests.conftest import MINILM

pytestmark = pytest.mark.server

# The whole matrix of bad bodies runs against the engine, without a server (tests/unit/gateway/test_engine.py).
# Here, one refused by the body model (BentoML's parsing) and one by the engine's checks, each in OpenAI's shape.
BAD_BODIES = [
    pytest.param({"input": [1.5, 2], "model": MINILM}, 400, "input", id="float-items"),
    pytest.param({"input": "x", "model": MINILM, "dimensions": 385}, 400, "dimensions", id="dimensions-too-large"),
]


def assert_tei_error(response, status: int) -> str:
    """TEI's error shape, with the status Embento gives that error on every route: the message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"}, body
    assert isinstance(body["error"], str) and body["error"]
    expected = {401: "Unauthorized", 429: "Overloaded", 503: "Unhealthy"}.get(
        status, "Backend" if status >= 500 else "Validation")
    assert body["error_type"] == expected, body
    return body["error"]


def assert_openai_error(response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    expected_type = "server_error" if status >= 500 else "invalid_request_error"
    assert error["type"] == expected_type
    if param is not None:
        assert error["param"] == param, error
    return error


def assert_healthy(client) -> None:
    assert client.get("/readyz").status_code == 200
    response = client.post("/v1/embeddings", json={"input": "still fine", "model": MINILM})
    assert response.status_code == 200 and len(response.json()["data"][0]["embedding"]) == 384


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
    from gateway.get_routes import LIMIT_FIELDS
    from config.settings import EmbentoConfig
    from tests.conftest import MAX_AUDIO_SECONDS, TINY_MEAN

    info = client.get("/info").json()
    expected = EmbentoConfig(max_audio_seconds=MAX_AUDIO_SECONDS)  # the test server's only change to a limit
    assert info["limits"] == {name: getattr(expected, name) for name in LIMIT_FIELDS}
    models = {m["id"]: m for m in info["models"]}
    # Unconfigured, the pass limits are the device's: on CPU, 32 inputs and 16,384 tokens.
    assert models[MINILM] == {"id": MINILM, "kind": "embed", "device": "cpu", "batch_size": 32,
                              "max_batch_tokens": 16384}
    assert models[TINY_MEAN]["kind"] == "embed" and len(models) == 16
