"""Start and stop a production-mode `bentoml serve` on loopback for a benchmark."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(
    port: int, service_name: str | None = None, target: str = "service:Gateway", cwd: Path = ROOT, **settings: str
) -> subprocess.Popen:
    """`settings` are extra environment variables, e.g. EMBENTO_MODEL_ID; other EMBENTO_* are dropped. With a
    `service_name` (say TextEmbedder), that model service alone serves on the port. `cwd`: the bundle served
    (another checkout of it, to compare)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBENTO_")}
    env.update(HF_HUB_OFFLINE="1", BENTOML_DO_NOT_TRACK="True", **settings)
    serve = (
        ["bentoml", "serve", target]
        if service_name is None
        else ["bentoml_cli._internal.start", "start-http-server", target, "--service-name", service_name]
    )
    process = subprocess.Popen(
        [sys.executable, "-m", *serve, "--host", "127.0.0.1", "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return wait_until_ready(process, f"http://127.0.0.1:{port}/readyz")


def wait_until_ready(process: subprocess.Popen, url: str) -> subprocess.Popen:
    """`process` (started in a session of its own) once `url` answers 200; killed if it never does."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)  # startup time is measured at this resolution
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    raise SystemExit(f"{url} did not answer 200 (exit status {process.poll()})")


async def closed_loop(
    url: str,
    request_for: Callable[[list[str]], tuple[str, dict]],
    corpus: list[str],
    seconds: float,
    in_flight: int = 8,
    per_request: int = 10,
) -> tuple[float, list[int]]:
    """(inputs per second, response sizes in bytes) with `in_flight` clients, each sending `per_request` inputs
    of `corpus` at a time as `request_for(batch)` = (path, body) and the next as soon as one is answered."""
    done, sizes = 0, []
    deadline = time.perf_counter() + seconds

    async def client(session: aiohttp.ClientSession, offset: int) -> None:
        nonlocal done
        at = offset
        while time.perf_counter() < deadline:
            batch = [corpus[(at + i) % len(corpus)] for i in range(per_request)]
            at += per_request * in_flight
            path, body = request_for(batch)
            async with session.post(url + path, json=body) as response:
                assert response.status == 200, await response.text()
                sizes.append(len(await response.read()))
            done += per_request

    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session, i * per_request) for i in range(in_flight)))
        return done / (time.perf_counter() - started), sizes


def stop_server(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)
