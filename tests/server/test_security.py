"""A server with API keys (from the configuration and a key file) and CORS for one origin: every route but
the probes needs a current key, refusals are OpenAI-shaped 401s, and no key ever reaches the log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.http.errors import ERROR_SHAPES
from tests.asserts import assert_openai_error, assert_tei_error, assert_voyage_error
from tests.conftest import MINILM, running_server

pytestmark = pytest.mark.server

KEY, FILE_KEY, RETIRED, WRONG = "current-key-7f3a9c", "file-key-51be0d", "retired-key-c0ffee", "wrong-key-d15ea5e"
ORIGIN = "https://app.example.com"
EMBED = ("POST", "/v1/embeddings", {"input": "hi", "model": MINILM})
GUARDED = [
    EMBED,
    ("POST", "/embeddings", {"input": "hi"}),
    ("POST", "/rerank", {"query": "q", "documents": ["d"]}),
    ("POST", "/v2/rerank", {"query": "q", "documents": ["d"], "model": MINILM}),
    ("POST", "/v1/classify", {"input": "x"}),
    ("POST", "/v2/embed", {"texts": ["hi"], "model": MINILM}),
    ("POST", "/embed", {"inputs": "hi"}),
    ("POST", "/", {"inputs": "hi"}),
    ("POST", "/tokenize", {"inputs": "hi"}),
    ("POST", "/v1/contextualizedembeddings", {"inputs": [["hi", "there"]]}),
    ("POST", "/v1/multimodalembeddings", {"inputs": [{"content": [{"type": "text", "text": "hi"}]}]}),
    ("GET", "/v1/models", None),
    ("GET", "/models", None),
    ("GET", "/docs.json", None),
    ("GET", "/schema.json", None),
    ("GET", "/metrics", None),
    ("GET", "/info", None),
    ("GET", "/", None),
]
PROBES = ("/livez", "/readyz", "/healthz", "/health")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("secured")
    (folder / "keys.txt").write_text(f"{FILE_KEY}\n")
    config = {
        "models": [{"model_id": MINILM}],
        "api_key": [KEY],
        "api_key_file": str(folder / "keys.txt"),
        "cors_allow_origins": [ORIGIN],
    }
    with running_server(folder, config) as (url, _):
        yield url, folder / "server.log"


def test_every_route_but_the_probes_needs_a_current_key(secured):
    url, _ = secured
    with httpx.Client(base_url=url, timeout=60) as http:
        for method, path, body in GUARDED:
            for headers in (
                {},
                {"Authorization": f"Bearer {WRONG}"},
                {"Authorization": f"Bearer {RETIRED}"},
                {"Authorization": KEY},
                {"Authorization": f"Basic {KEY}"},
            ):
                response = http.request(method, path, json=body, headers=headers)
                shape = ERROR_SHAPES.get(path, "openai") if method == "POST" else "openai"
                if shape == "tei":
                    assert "API key" in assert_tei_error(response, 401)
                elif shape == "voyage":
                    assert "API key" in assert_voyage_error(response, 401)
                else:
                    assert_openai_error(response, 401)
                    assert response.json()["error"]["code"] == "invalid_api_key"
        for path in PROBES:
            assert http.get(path).status_code == 200, path
        for key in (KEY, FILE_KEY):
            method, path, body = EMBED
            response = http.request(method, path, json=body, headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == 200 and len(response.json()["data"][0]["embedding"]) == 384
        assert http.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_bentoml_client_with_a_token(secured):
    import bentoml

    url, _ = secured
    with bentoml.SyncHTTPClient(url, token=FILE_KEY) as client:
        assert len(client.embeddings({"input": ["a", "b"]})["data"]) == 2


def test_cors_only_for_the_configured_origin(secured, server):
    url, _ = secured
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    allowed = httpx.options(f"{url}/v1/embeddings", headers={"Origin": ORIGIN, **preflight})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    other = httpx.options(f"{url}/v1/embeddings", headers={"Origin": "https://evil.example", **preflight})
    assert "access-control-allow-origin" not in other.headers
    # The default configuration (the shared test server) answers no cross-origin request.
    default = httpx.options(f"{server}/v1/embeddings", headers={"Origin": ORIGIN, **preflight})
    assert "access-control-allow-origin" not in default.headers


def test_no_key_reaches_the_log(secured):
    url, log = secured
    with httpx.Client(base_url=url, timeout=60) as http:  # right and wrong keys, and a failing request
        http.post("/v1/embeddings", json={"input": "x"}, headers={"Authorization": f"Bearer {KEY}"})
        http.post("/v1/embeddings", json={"input": []}, headers={"Authorization": f"Bearer {FILE_KEY}"})
        http.post("/v1/embeddings", json={"input": "x"}, headers={"Authorization": f"Bearer {WRONG}"})
    text = log.read_text()
    assert "Embento initialized" in text or "TextEmbedder" in text  # the log is the server's
    for secret in (KEY, FILE_KEY, WRONG):
        assert secret not in text


def test_model_services_serve_on_unix_sockets_only(server_process):
    """In one `bentoml serve`, each model service serves on a Unix socket and on no TCP port; every TCP
    port the server listens on (the gateway's, the process manager's control) is on loopback. (Circus hands
    every worker all the sockets it made, so model services hold the gateway's port too, unserved: a
    worker serves only its `--fd`.)"""
    import json

    import psutil

    from runners import MODEL_SERVICES

    url, pid = server_process
    gateway_port = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    names = set(MODEL_SERVICES)
    model_services = [p for p in tree if names & set(p.cmdline())]
    assert len(model_services) == 5  # TextEmbedder, Reranker, ClipEmbedder, ClapEmbedder, ColPaliEmbedder

    def tcp_listeners(process: psutil.Process) -> set[tuple[str, int]]:
        return {(c.laddr.ip, c.laddr.port) for c in process.net_connections("inet") if c.status == psutil.CONN_LISTEN}

    for process in model_services:
        command = process.cmdline()
        served_fd = int(command[command.index("--fd") + 1])
        assert served_fd in {c.fd for c in process.net_connections("unix")}, command
        assert tcp_listeners(process) <= {gateway_port}
    listening = set().union(*(tcp_listeners(p) for p in tree))
    assert gateway_port in listening and {ip for ip, _ in listening} == {"127.0.0.1"}, listening
    runner_maps = [json.loads(p.environ()["BENTOML_RUNNER_MAP"]) for p in tree if "BENTOML_RUNNER_MAP" in p.environ()]
    addresses = {name: address for runner_map in runner_maps for name, address in runner_map.items()}
    assert all(addresses[name].startswith("file://") for name in names), addresses
