"""The gateway's ASGI edge on its own: API key (the tenant gate), media type, size limit, OpenAI error bodies."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.http.errors import ErrorBodies
from gateway.http.guard import RequestGuard
from gateway.tenants.gate import PROBE_PATHS, TenantGate
from gateway.tenants.keys import TENANT, Keyring, Keys, config_tenant
from gateway.tenants.ledger import SharedMemoryLedger
from gateway.tenants.usage import AccessLog


async def echo(request):
    return JSONResponse({"ok": True, "bytes": len(await request.body())})


async def framework_error(request):
    return JSONResponse(
        {"error": "1 validation error", "detail": [{"loc": ["body", "input"], "msg": "bad"}]}, status_code=400
    )


async def crash_text(request):
    return PlainTextResponse("Traceback: secret internals", status_code=500)


async def caller(request):
    return JSONResponse({"tenant": TENANT.get().name, "may_set_keep_alive": TENANT.get().may_set_keep_alive})


def make_client(
    api_keys: tuple[str, ...] = ("s3cret",),
    limit: int = 2048,
    open_paths: frozenset[str] = PROBE_PATHS,
    admin_key: str | None = None,
) -> TestClient:
    app = Starlette(
        routes=[
            Route("/v1/embeddings", echo, methods=["POST"]),
            Route("/readyz", echo),
            Route("/metrics", echo),
            Route("/docs.json", echo),
            Route("/bad", framework_error, methods=["POST"]),
            Route("/crash", crash_text),
            Route("/caller", caller, methods=["POST"]),
        ]
    )
    guarded = RequestGuard(app, max_request_bytes=limit)
    wrapped = ErrorBodies(
        TenantGate(
            guarded, Keys(api_keys, None, admin_key=admin_key), SharedMemoryLedger(), open_paths, AccessLog(False)
        )
    )
    return TestClient(wrapped)


def test_api_key_required_on_api_routes():
    client = make_client()
    response = client.post("/v1/embeddings", json={})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert client.post("/v1/embeddings", json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.post("/v1/embeddings", json={}, headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_the_admin_key_is_the_admin_caller_on_a_server_without_api_keys():
    """There, anyone may call: only the admin key may also set a model's `keep_alive` (gateway/served/requests.py)."""
    open_server = make_client(api_keys=(), admin_key="admin-secret")
    admin = {"Authorization": "Bearer admin-secret"}
    assert open_server.post("/caller", headers=admin).json() == {"tenant": "default", "may_set_keep_alive": True}
    for headers in ({}, {"Authorization": "Bearer admin-secre"}, {"Authorization": "Basic admin-secret"}):
        assert open_server.post("/caller", headers=headers).json() == {"tenant": "default", "may_set_keep_alive": False}
    keyed = make_client(api_keys=("s3cret",), admin_key="admin-secret")  # there it is no API key
    assert keyed.post("/caller", headers=admin).status_code == 401


def test_probes_and_preflight_need_no_key_but_docs_and_metrics_do():
    client = make_client()
    assert client.get("/readyz").status_code == 200
    assert client.options("/v1/embeddings").status_code != 401
    assert client.get("/docs.json").status_code == 401 and client.get("/metrics").status_code == 401
    public_metrics = make_client(open_paths=PROBE_PATHS | {"/metrics"})
    assert public_metrics.get("/metrics").status_code == 200


def test_several_keys_rotate_and_odd_headers_are_a_401():
    client = make_client(api_keys=("new-key", "old-key"))
    for key in ("new-key", "old-key"):
        assert client.post("/v1/embeddings", json={}, headers={"Authorization": f"Bearer {key}"}).status_code == 200
    for header in (
        "Bearer retired-key",
        "Bearer",
        "Basic new-key",
        "bearer  new-key ",
        "Bearer n\u00e9w-key",
        "Bearer new-key-and-more",
        "Bearer new",
    ):
        response = client.post("/v1/embeddings", json={}, headers={"Authorization": header.encode()})
        assert response.status_code == (200 if header == "bearer  new-key " else 401), header


def test_key_comparison_looks_at_every_key_in_constant_time(monkeypatch):
    import hmac

    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    keyring = Keyring([config_tenant(("first-key", "second-key", "third-key"))])
    for token, expected in (("first-key", True), ("third-key", True), ("none-of-them", False), ("é", False)):
        calls.clear()
        assert (keyring.tenant(token) is not None) is expected
        assert len(calls) == 3  # no early exit on a match
        assert all(isinstance(a, bytes) and len(a) == len(b) == 32 for a, b in calls)  # digests, whatever was sent


def test_no_key_configured_means_open():
    assert make_client(api_keys=()).post("/v1/embeddings", json={}).status_code == 200


@pytest.mark.parametrize("size, status", [(100, 200), (5000, 413)])
def test_body_limit(size, status):
    client = make_client(api_keys=())
    assert (
        client.post("/v1/embeddings", content=b"x" * size, headers={"content-type": "application/json"}).status_code
        == status
    )


def test_framework_errors_are_reshaped_with_their_status():
    client = make_client(api_keys=())
    error = client.post("/bad", json={}).json()["error"]
    assert error == {"message": "input: bad", "type": "invalid_request_error", "param": "input", "code": None}
    crash = client.get("/crash")
    assert crash.status_code == 500
    assert crash.json()["error"]["type"] == "server_error" and "secret" not in crash.text
    missing = client.get("/nope")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"


def test_admission_bounds_waiting_work_and_releases_it():
    from config import errors
    from gateway.queue.admission import Admission

    admission = Admission("TextEmbedder", max_items=10, max_tokens=100)
    with admission.admit(500, 5000):  # an idle service takes even an oversize request
        with pytest.raises(errors.Overloaded, match="TextEmbedder queue is full"):
            with admission.admit(1, 1):
                pass
    with admission.admit(6, 50), admission.admit(4, 50):
        assert (admission.items, admission.tokens) == (10, 100)
        for items, tokens in ((1, 0), (0, 1)):
            with pytest.raises(errors.Overloaded), admission.admit(items, tokens):
                pass
    assert (admission.items, admission.tokens) == (0, 0)
    with pytest.raises(RuntimeError), admission.admit(3, 3):
        raise RuntimeError("the model service failed")
    assert (admission.items, admission.tokens) == (0, 0)  # released on failure too


def test_requests_beyond_the_concurrency_cap_are_refused_before_their_body_is_read():
    import asyncio

    import httpx

    release = asyncio.Event()
    bodies_read = []

    async def slow(request):
        bodies_read.append(await request.body())
        await release.wait()
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/v1/embeddings", slow, methods=["POST"]), Route("/readyz", echo)])
    guarded = ErrorBodies(RequestGuard(app, max_request_bytes=2048, max_concurrent_requests=2))

    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guarded), base_url="http://edge") as http:
            held = [asyncio.create_task(http.post("/v1/embeddings", json={"n": i})) for i in range(2)]
            while len(bodies_read) < 2:
                await asyncio.sleep(0.01)
            refused = await http.post("/v1/embeddings", json={"n": 2})
            probe = await http.get("/readyz")  # probes are never counted nor refused
            release.set()
            return [refused, probe, *await asyncio.gather(*held), await http.post("/v1/embeddings", json={"n": 3})]

    refused, probe, *answered = asyncio.run(scenario())
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert (
        refused.json()["error"]["code"] == "overloaded"
        and "2 requests are in flight" in refused.json()["error"]["message"]
    )
    assert probe.status_code == 200 and [r.status_code for r in answered] == [200, 200, 200]
    assert len(bodies_read) == 3  # the refused body was never read
