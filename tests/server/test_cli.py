"""`embento serve` through a real server: the configured model services and no others, what it prints as it starts
and the ready banner (the flags and variables themselves: tests/unit/commands/test_cli.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commands.flags import PROJECT_ROOT


def _service_names(cmdline: list[str]) -> list[str]:
    return [cmdline[i + 1] for i, arg in enumerate(cmdline[:-1]) if arg == "--service-name"]


@pytest.mark.server
def test_embento_serve_runs_the_configured_models(tiny_bert_path, tmp_path):
    """Its file (./embento.yaml: an eager model with an alias, a lazy one) with flags over it; the start lines and
    the ready banner say what is in force: the backend and device `auto` chose, and why; the lazy model as lazy and
    the alias as an alias."""
    import os
    import signal
    import time

    import httpx
    import psutil
    import yaml

    from tests.conftest import READY_POLL_S, free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBENTO_")}
    env.update(
        HF_HUB_OFFLINE="1",
        BENTOML_HOME=str(tmp_path / "bentoml"),
        EMBENTO_BATCH_SIZE="999999",
        EMBENTO_CACHE_DIR=os.environ["EMBENTO_CACHE_DIR"],
    )
    configured = [
        {"model_id": str(tiny_bert_path), "served_model_name": "flagged", "aliases": ["flagged-alias"]},
        {"model_id": str(tiny_bert_path), "served_model_name": "lazy-one", "load": "lazy"},
    ]
    (tmp_path / "embento.yaml").write_text(yaml.safe_dump({"models": configured}))
    command = [
        sys.executable,
        "-m",
        "commands",
        "serve",
        "--pooling-method",
        "cls",
        "--batch-size",
        "4",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    log = tmp_path / "serve.log"
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(PROJECT_ROOT)},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
                if models.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(READY_POLL_S)
        assert models.status_code == 200
        cards = models.json()["data"]
        assert [(m["id"], m["dimension"], m["alias_of"]) for m in cards] == [
            ("flagged", 32, None),
            ("flagged-alias", 32, "flagged"),
        ]
        device = {m["id"]: m["device"] for m in httpx.get(f"http://127.0.0.1:{port}/info").json()["models"]}["flagged"]
        response = httpx.post(f"http://127.0.0.1:{port}/v1/embeddings", json={"input": ["a", "b"], "model": "flagged"})
        assert response.status_code == 200 and len(response.json()["data"]) == 2
        children = psutil.Process(process.pid).children(recursive=True)
        services = {arg for child in children for arg in _service_names(child.cmdline())}
        assert services == {"Embento", "TextEmbedder"}  # no Reranker process for an embedder-only config
        gateways = [child for child in children if "Embento" in _service_names(child.cmdline())]
        assert gateways and not any("libtorch" in Path(f"/proc/{g.pid}/maps").read_text() for g in gateways)
        while "embento: ready on" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)  # the banner follows /readyz by one poll
        output = log.read_text()
        chosen = "chosen as it loads (the ready message and GET /v1/models say which, and why)"
        assert f"as 'flagged' (aliases: flagged-alias); backend auto, device auto: {chosen}\n" in output
        assert f"as 'lazy-one', lazy: loaded by its first request; backend auto, device auto: {chosen}\n" in output
        assert f"embento: ready on http://127.0.0.1:{port}" in output
        assert "flagged (text): POST /v1/embeddings" in output and "try: curl -s" in output
        backend, reason = cards[0]["backend"], cards[0]["backend_reason"]
        assert backend in ("onnx", "torch") and reason.startswith(f"{backend}: ")  # what `auto` chose, and why
        device_why = "no GPU" if device == "cpu" else "the first GPU"
        why = f"backend: auto, {reason.removeprefix(backend + ': ')}; device: auto, {device_why}"
        assert f"\n    runs on {backend}, {device} ({why})\n" in output
        assert "\n  lazy-one: lazy, not loaded: its first request loads it\n" in output
        assert "\n  flagged-alias: an alias of flagged\n" in output and "flagged-alias (text)" not in output
        assert "PyTorch was not found" not in output  # the gateway runs without torch on purpose: no alarm
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.mark.server
def test_the_ready_banner_lists_routes_that_exist_and_a_curl_that_works(server, client):
    from commands.serve import ready_banner
    from config.settings import EmbentoConfig

    banner = ready_banner(server, client.get("/v1/models").json(), EmbentoConfig(), needs_key=False)
    paths = set(client.get("/docs.json").json()["paths"])
    listed = {
        path
        for line in banner.splitlines()
        if ": POST " in line
        for path in line.split(": POST ")[1].replace(";", ",").split(", ")
    }
    assert listed and listed <= paths, listed - paths
    command = banner.splitlines()[-1].removeprefix("  try: ")
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, check=True)
    assert len(json.loads(result.stdout)["data"][0]["embedding"]) > 0
