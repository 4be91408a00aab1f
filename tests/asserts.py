"""Assertions on a running server's answers, shared by the server tests: the error shapes of each wire family
and a health check after an ordeal."""

from __future__ import annotations

import httpx

from tests.conftest import MINILM


def assert_tei_error(response: httpx.Response, status: int) -> str:
    """TEI's error shape, with the status Embento gives that error on every route: the message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"}, body
    assert isinstance(body["error"], str) and body["error"]
    expected = {401: "Unauthorized", 429: "Overloaded", 503: "Unhealthy"}.get(
        status, "Backend" if status >= 500 else "Validation"
    )
    assert body["error_type"] == expected, body
    return body["error"]


def assert_voyage_error(response: httpx.Response, status: int) -> str:
    """Voyage's error shape (its SDK reads `detail`), with this status: the message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"detail"} and isinstance(body["detail"], str) and body["detail"], body
    return body["detail"]


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    """OpenAI's error shape, with this status (and this `param` when given): the error object."""
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


def assert_healthy(client: httpx.Client) -> None:
    """Ready, and still embedding with MiniLM."""
    assert client.get("/readyz").status_code == 200
    response = client.post("/v1/embeddings", json={"input": "still fine", "model": MINILM})
    assert response.status_code == 200 and len(response.json()["data"][0]["embedding"]) == 384
