"""The tenant gate (gateway/tenants/gate.py) as ASGI middleware under the error rewriting, with a keys file and the
shared-memory ledger on a clock the test moves: 401s, 429s in the route's shape with when to retry, OpenAI's
`x-ratelimit-*` headers on answers and refusals, concurrency slots given back however a request ends, and what
each tenant used (metrics, access log)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.http.errors import ErrorBodies
from gateway.metrics import ACCOUNT, NO_MODEL
from gateway.tenants.gate import PROBE_PATHS, TenantGate, duration
from gateway.tenants.keys import TENANT, Keys
from gateway.tenants.ledger import SharedMemoryLedger, Standing
from gateway.tenants.redis_ledger import RedisLedger
from gateway.tenants.usage import AccessLog
from tests.conftest import free_port


def sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


TENANTS = [
    {"name": "gate-rated", "key_sha256": sha("rated-key"), "requests_per_minute": 3, "tokens_per_minute": 1000},
    {"name": "gate-tokens", "key_sha256": sha("tokens-key"), "tokens_per_minute": 120},  # two a second
    {"name": "gate-single", "key_sha256": sha("single-key"), "max_concurrent_requests": 1},
    {"name": "gate-free", "key_sha256": sha("free-key"), "models": ["m1"]},
    {"name": "gate-series", "key_sha256": sha("series-key"), "tokens_per_minute": 5, "max_concurrent_requests": 2},
]
RATED, TOKENS, SINGLE, FREE = (
    {"Authorization": f"Bearer {key}"} for key in ("rated-key", "tokens-key", "single-key", "free-key")
)
RATE_HEADERS = [
    f"x-ratelimit-{what}-{kind}" for kind in ("requests", "tokens") for what in ("limit", "remaining", "reset")
]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class CountingLedger(SharedMemoryLedger):
    """The shared-memory ledger, counting its calls."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.entered: list[str] = []
        self.left: list[tuple[str, int]] = []

    async def enter(self, tenant, request_id) -> Standing:
        self.entered.append(tenant.name)
        return await super().enter(tenant, request_id)

    async def leave(self, tenant, request_id, tokens) -> Standing:
        self.left.append((tenant.name, tokens))
        return await super().leave(tenant, request_id, tokens)


class Gate:
    """The app behind the gate: `/v1/embeddings` (OpenAI's errors) and `/embed` (TEI's) answer with the tenant
    they ran as, charging the body's `tokens` to `model` as an answered request would; `/slow` waits for
    `release`; `/silent` raises before answering anything."""

    def __init__(self, keys_file: Path, ledger=None, access_log: bool = False) -> None:
        self.clock = Clock()
        self.ledger = ledger or CountingLedger(self.clock)
        self.ran: list[str] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        routes = Starlette(
            routes=[Route(path, self.answer, methods=["POST"]) for path in ("/v1/embeddings", "/embed")]
            + [
                Route("/slow", self.slow, methods=["POST"]),
                Route("/v1/models", self.models),
                Route("/readyz", self.models),
            ]
        )

        async def app(scope, receive, send):
            if scope["type"] == "http" and scope["path"] == "/silent":
                raise RuntimeError("a bug: no answer at all")
            await routes(scope, receive, send)

        gate = TenantGate(app, Keys((), str(keys_file)), self.ledger, PROBE_PATHS, AccessLog(access_log))
        self.asgi = ErrorBodies(gate, shapes={"/embed": "tei"})
        self.client = TestClient(self.asgi)

    async def answer(self, request: Request) -> JSONResponse:
        body = json.loads(await request.body() or b"{}")
        self.ran.append(TENANT.get().name)
        account = ACCOUNT.get()
        account.model, account.tokens = body.get("model", "m1"), body.get("tokens", 0)
        if body.get("fail"):
            return JSONResponse(
                {"error": {"message": "input: bad", "type": "invalid_request_error", "param": "input", "code": None}},
                status_code=400,
            )
        return JSONResponse({"tenant": TENANT.get().name})

    async def slow(self, request: Request) -> JSONResponse:
        self.entered.set()
        await self.release.wait()
        return JSONResponse({"tenant": TENANT.get().name})

    async def models(self, request: Request) -> JSONResponse:
        return JSONResponse({"tenant": TENANT.get().name})


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": TENANTS}))
    path.chmod(0o600)
    return path


@pytest.fixture
def gate(keys_file: Path) -> Gate:
    return Gate(keys_file)


class AccessLines(logging.Handler):
    """The access log's lines, as JSON."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(record.getMessage()))

    def collect(self) -> None:
        """Start, beside the handler `AccessLog(True)` added to the logger as it does at start."""
        logging.getLogger("embento.access").addHandler(self)


@pytest.fixture
def access_lines() -> Iterator[AccessLines]:
    """An access log as at start (its logger without handlers), put back as it was afterwards."""
    logger = logging.getLogger("embento.access")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    logger.handlers[:] = []
    try:
        yield AccessLines()
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def rate_headers(response: httpx.Response) -> dict[str, str]:
    return {name: response.headers[name] for name in RATE_HEADERS if name in response.headers}


# Who calls


def test_a_missing_or_unknown_key_is_a_401_in_the_routes_shape(gate):
    for headers in (
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic rated-key"},
        {"Authorization": f"Bearer {sha('rated-key')}"},
    ):
        openai = gate.client.post("/v1/embeddings", json={}, headers=headers)
        assert openai.status_code == 401 and openai.json()["error"]["code"] == "invalid_api_key"
        tei = gate.client.post("/embed", json={}, headers=headers)
        assert tei.status_code == 401 and tei.json()["error_type"] == "Unauthorized"
        assert not rate_headers(openai) and not rate_headers(tei)
    assert gate.ran == [] and gate.ledger.entered == []


def test_the_request_runs_as_its_keys_tenant(gate):
    assert gate.client.post("/v1/embeddings", json={}, headers=RATED).json() == {"tenant": "gate-rated"}
    assert gate.client.post("/embed", json={}, headers=FREE).json() == {"tenant": "gate-free"}
    assert gate.client.get("/v1/models", headers=SINGLE).json() == {"tenant": "gate-single"}
    assert gate.client.get("/readyz").json() == {"tenant": "default"}  # a probe needs no key
    assert gate.ran == ["gate-rated", "gate-free"]


# Headers and 429s


def test_answers_carry_the_buckets_after_their_charge(gate):
    response = gate.client.post("/v1/embeddings", json={"tokens": 10}, headers=RATED)
    assert response.status_code == 200
    assert rate_headers(response) == {
        "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "2",
        "x-ratelimit-reset-requests": "20s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "990",
        "x-ratelimit-reset-tokens": "600ms",
    }
    response = gate.client.post("/v1/embeddings", json={"tokens": 20}, headers=RATED)
    assert rate_headers(response)["x-ratelimit-remaining-requests"] == "1"
    assert rate_headers(response)["x-ratelimit-reset-requests"] == "40s"
    assert rate_headers(response)["x-ratelimit-remaining-tokens"] == "970"
    assert rate_headers(response)["x-ratelimit-reset-tokens"] == "1.8s"
    assert gate.ledger.left == [("gate-rated", 10), ("gate-rated", 20)]


def test_an_error_answer_carries_the_headers_too(gate):
    response = gate.client.post("/embed", json={"fail": True}, headers=RATED)
    assert response.status_code == 400 and response.json()["error_type"] == "Validation"
    assert rate_headers(response)["x-ratelimit-remaining-requests"] == "2"


def test_over_its_request_rate_a_tenant_gets_a_429_with_when_to_retry(gate):
    for _ in range(3):
        assert gate.client.post("/v1/embeddings", json={"tokens": 10}, headers=RATED).status_code == 200
    throttled = sample("embento_tenant_throttled_total", tenant="gate-rated", limit="requests")
    refused = gate.client.post("/v1/embeddings", json={"tokens": 10}, headers=RATED)
    assert refused.status_code == 429 and gate.ran == ["gate-rated"] * 3  # the route never ran
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
    assert error["message"] == ("rate limit reached for requests per minute of API key 'gate-rated'; retry in 20 s")
    assert refused.headers["retry-after"] == "20" and refused.headers["retry-after-ms"] == "20000"
    assert refused.headers.get_list("retry-after") == ["20"]  # not beside the server's default 1
    assert rate_headers(refused) == {
        "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1m0s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "970",
        "x-ratelimit-reset-tokens": "1.8s",
    }
    assert sample("embento_tenant_throttled_total", tenant="gate-rated", limit="requests") == throttled + 1
    gate.clock.now += 17.5
    again = gate.client.post("/v1/embeddings", json={}, headers=RATED)
    assert again.status_code == 429 and again.headers["retry-after"] == "3"  # 2.5 s, in whole seconds
    assert again.headers["retry-after-ms"] == "2500"
    gate.clock.now += 2.5
    assert gate.client.post("/v1/embeddings", json={}, headers=RATED).status_code == 200
    assert gate.ledger.left == [("gate-rated", 10)] * 3 + [("gate-rated", 0)]  # refusals take no slot back


def test_over_its_tokens_a_tenant_waits_until_the_bucket_is_above_zero(gate):
    big = gate.client.post("/v1/embeddings", json={"tokens": 300}, headers=TOKENS)  # admitted with 120 left
    assert big.status_code == 200
    assert rate_headers(big) == {
        "x-ratelimit-limit-tokens": "120",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "2m30s",
    }  # -180, refilling 2 a second
    refused = gate.client.post("/v1/embeddings", json={"tokens": 1}, headers=TOKENS)
    assert refused.status_code == 429 and "tokens per minute of API key 'gate-tokens'" in refused.text
    assert refused.headers["retry-after"] == "91" and refused.headers["retry-after-ms"] == "90500"
    assert "x-ratelimit-limit-requests" not in refused.headers  # the tenant has no request limit
    gate.clock.now += 90.5
    assert gate.client.post("/v1/embeddings", json={"tokens": 1}, headers=TOKENS).status_code == 200


def test_a_429_on_a_tei_route_is_teis_overloaded_with_the_same_headers(gate):
    for _ in range(3):
        gate.client.post("/embed", json={}, headers=RATED)
    refused = gate.client.post("/embed", json={}, headers=RATED)
    assert refused.status_code == 429
    assert refused.json() == {
        "error": "rate limit reached for requests per minute of API key 'gate-rated'; retry in 20 s",
        "error_type": "Overloaded",
    }
    assert refused.headers["retry-after"] == "20" and refused.headers["retry-after-ms"] == "20000"
    assert rate_headers(refused)["x-ratelimit-remaining-requests"] == "0"


def test_a_tenant_without_limits_is_not_counted(gate):
    for _ in range(20):
        response = gate.client.post("/v1/embeddings", json={"tokens": 10**6}, headers=FREE)
        assert response.status_code == 200 and not rate_headers(response)
        assert "retry-after" not in response.headers
    assert gate.ledger.entered == [] and gate.ledger.left == []


def test_only_posts_are_counted(gate):
    for _ in range(10):
        assert gate.client.get("/v1/models", headers=RATED).status_code == 200
    assert gate.ledger.entered == []
    response = gate.client.post("/v1/embeddings", json={}, headers=RATED)
    assert rate_headers(response)["x-ratelimit-remaining-requests"] == "2"


def test_tenants_are_limited_apart(gate):
    for _ in range(3):
        gate.client.post("/v1/embeddings", json={}, headers=RATED)
    assert gate.client.post("/v1/embeddings", json={}, headers=RATED).status_code == 429
    assert gate.client.post("/v1/embeddings", json={}, headers=TOKENS).status_code == 200


# Concurrency


def test_concurrent_requests_past_the_limit_are_refused_and_slots_come_back(gate):
    async def scenario() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=gate.asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://gate") as http:
            held = asyncio.create_task(http.post("/slow", json={}, headers=SINGLE))
            await asyncio.wait_for(gate.entered.wait(), 10)
            refused = await http.post("/v1/embeddings", json={}, headers=SINGLE)
            other = await http.post("/v1/embeddings", json={}, headers=RATED)  # another tenant's slots
            gate.release.set()
            return [refused, other, await held, await http.post("/v1/embeddings", json={}, headers=SINGLE)]

    refused, other, held, after = asyncio.run(scenario())
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert "concurrent requests of API key 'gate-single'" in refused.json()["error"]["message"]
    assert refused.headers["retry-after"] == "1" and refused.headers["retry-after-ms"] == "1000"
    assert not rate_headers(refused)  # no bucket to report
    assert [other.status_code, held.status_code, after.status_code] == [200, 200, 200]


def test_a_request_that_gets_no_answer_gives_its_slot_back(gate):
    with pytest.raises(RuntimeError, match="no answer at all"):
        gate.client.post("/silent", json={}, headers=SINGLE)
    assert gate.ledger.left == [("gate-single", 0)]
    assert gate.client.post("/v1/embeddings", json={}, headers=SINGLE).status_code == 200
    assert gate.ledger.left == [("gate-single", 0)] * 2  # once each


# Where the counts live failing


def test_a_failed_closed_limits_store_is_a_503_and_open_lets_through_uncounted(keys_file):
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    closed = Gate(keys_file, ledger=RedisLedger(dead, 1.0, lease_s=60, fail_open=False))
    response = closed.client.post("/v1/embeddings", json={}, headers=RATED)
    assert response.status_code == 503 and response.json()["error"]["code"] == "model_not_ready"
    assert response.headers["retry-after"] == "1" and closed.ran == []
    assert closed.client.post("/v1/embeddings", json={}, headers=FREE).status_code == 200  # not counted: not asked
    opened = Gate(keys_file, ledger=RedisLedger(dead, 1.0, lease_s=60, fail_open=True))
    response = opened.client.post("/v1/embeddings", json={}, headers=RATED)
    assert response.status_code == 200 and not rate_headers(response) and opened.ran == ["gate-rated"]


# What each tenant used


def test_usage_is_counted_per_tenant_and_model(gate):
    before = {
        status: sample("embento_tenant_requests_total", tenant="gate-rated", model=model, status=status)
        for model, status in (("m2", "200"), (NO_MODEL, "429"))
    }
    tokens = sample("embento_tenant_tokens_total", tenant="gate-rated", model="m2")
    for _ in range(3):
        gate.client.post("/v1/embeddings", json={"tokens": 7, "model": "m2"}, headers=RATED)
    gate.client.post("/v1/embeddings", json={"tokens": 7, "model": "m2"}, headers=RATED)  # refused
    assert sample("embento_tenant_requests_total", tenant="gate-rated", model="m2", status="200") == before["200"] + 3
    assert (
        sample("embento_tenant_requests_total", tenant="gate-rated", model=NO_MODEL, status="429") == before["429"] + 1
    )
    assert sample("embento_tenant_tokens_total", tenant="gate-rated", model="m2") == tokens + 21


def test_limited_tenants_throttled_series_start_at_zero(gate):
    gate.client.get("/v1/models", headers=FREE)  # any request: the keyring in force is read
    for limit in ("tokens", "concurrency"):  # never throttled, yet at zero: a rate over them reads
        assert (
            REGISTRY.get_sample_value("embento_tenant_throttled_total", {"tenant": "gate-series", "limit": limit}) == 0
        )
    assert (
        REGISTRY.get_sample_value("embento_tenant_throttled_total", {"tenant": "gate-series", "limit": "requests"})
        is None
    )  # not its limit
    for limit in ("requests", "tokens", "concurrency"):
        assert (
            REGISTRY.get_sample_value("embento_tenant_throttled_total", {"tenant": "gate-free", "limit": limit}) is None
        )


def test_the_access_log_has_a_line_per_request_and_never_the_key(keys_file, access_lines, capsys):
    gate = Gate(keys_file, access_log=True)
    access_lines.collect()
    for _ in range(4):
        gate.client.post("/v1/embeddings", json={"tokens": 5, "model": "m2"}, headers=RATED)
    gate.client.post("/embed", json={}, headers={"Authorization": "Bearer wrong-key"})  # a 401: no tenant
    gate.client.get("/v1/models", headers=RATED)
    gate.client.get("/readyz")  # a probe: no line
    assert [
        (line["tenant"], line["method"], line["route"], line["model"], line["tokens"], line["status"])
        for line in access_lines.lines
    ] == [("gate-rated", "POST", "/v1/embeddings", "m2", 5, 200)] * 3 + [
        ("gate-rated", "POST", "/v1/embeddings", NO_MODEL, 0, 429),
        (None, "POST", "/embed", NO_MODEL, 0, 401),
        ("gate-rated", "GET", "/v1/models", NO_MODEL, 0, 200),
    ]
    assert all(line["duration_ms"] >= 0 and line["time"].endswith("Z") for line in access_lines.lines)
    written = capsys.readouterr().out.splitlines()  # AccessLog's own handler: the same lines on standard output
    assert [json.loads(line) for line in written] == access_lines.lines
    assert "rated-key" not in "".join(written)


def test_duration_is_written_as_openai_writes_resets():
    assert [duration(s) for s in (-1, 0, 0.0201, 0.5, 1, 1.5, 3.799, 18.8, 60, 150, 360)] == [
        "0ms",
        "0ms",
        "21ms",
        "500ms",
        "1s",
        "1.5s",
        "3.799s",
        "18.8s",
        "1m0s",
        "2m30s",
        "6m0s",
    ]


def test_duration_rounds_before_it_splits():
    assert [duration(s) for s in (0.9996, 59.9996, 119.9996)] == ["1s", "1m0s", "2m0s"]
