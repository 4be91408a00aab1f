"""The gateway's ASGI edge on its own: API key, media type, size limit, OpenAI error bodies."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.errors import OpenAIErrorBodies
from gateway.guard import RequestGuard


async def echo(request):
    return JSONResponse({"ok": True, "bytes": len(await request.body())})


async def framework_error(request):
    return JSONResponse({"error": "1 validation error", "detail": [{"loc": ["body", "input"], "msg": "bad"}]},
                        status_code=400)


async def crash_text(request):
    return PlainTextResponse("Traceback: secret internals", status_code=500)


def make_client(api_key: str | None = "s3cret", limit: int = 2048) -> TestClient:
    app = Starlette(routes=[Route("/v1/embeddings", echo, methods=["POST"]), Route("/readyz", echo),
                            Route("/bad", framework_error, methods=["POST"]), Route("/crash", crash_text)])
    wrapped = OpenAIErrorBodies(RequestGuard(app, api_key=api_key, max_request_bytes=limit))
    return TestClient(wrapped)


def test_api_key_required_on_api_routes():
    client = make_client()
    response = client.post("/v1/embeddings", json={})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert client.post("/v1/embeddings", json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.post("/v1/embeddings", json={}, headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_probes_and_preflight_need_no_key():
    client = make_client()
    assert client.get("/readyz").status_code == 200
    assert client.options("/v1/embeddings").status_code != 401


def test_no_key_configured_means_open():
    assert make_client(api_key=None).post("/v1/embeddings", json={}).status_code == 200


@pytest.mark.parametrize("size, status", [(100, 200), (5000, 413)])
def test_body_limit(size, status):
    client = make_client(api_key=None)
    assert client.post("/v1/embeddings", content=b"x" * size,
                       headers={"content-type": "application/json"}).status_code == status


def test_framework_errors_are_reshaped_with_their_status():
    client = make_client(api_key=None)
    error = client.post("/bad", json={}).json()["error"]
    assert error == {"message": "input: bad", "type": "invalid_request_error", "param": "input", "code": None}
    crash = client.get("/crash")
    assert crash.status_code == 500
    assert crash.json()["error"]["type"] == "server_error" and "secret" not in crash.text
    missing = client.get("/nope")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"
