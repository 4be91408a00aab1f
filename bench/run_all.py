"""Start `bentoml serve` with the default model, measure the in-process ceiling, then the server.

    python bench/run_all.py [--duration 20]

Prints each scenario's figures and the server/ceiling ratio. Loopback only, bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ceiling  # noqa: E402
import load  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TARGETS = {"32 in flight x 1 sentence": 0.60, "8 in flight x 10 sentences": 0.75}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBENTO_")}
    env.update(HF_HUB_OFFLINE="1", BENTOML_DO_NOT_TRACK="True")
    process = subprocess.Popen(
        [sys.executable, "-m", "bentoml", "serve", "service:Gateway", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(1)
    os.killpg(process.pid, signal.SIGKILL)
    raise SystemExit("server did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per scenario")
    args = parser.parse_args()
    import torch

    from models.resolve import packaged_model_path

    port = free_port()
    server = start_server(port)
    try:
        threads = torch.get_num_threads()
        print(f"torch threads: {threads}; cores: {os.cpu_count()}")
        ceilings = ceiling.run(str(packaged_model_path(MODEL)), threads, args.duration / 2)
        figures = asyncio.run(load.run_all(f"http://127.0.0.1:{port}/v1/embeddings", MODEL, server.pid,
                                           args.duration, 20000))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    print("\nscenario                                  server/ceiling  target")
    for name, figure in figures.items():
        ratio = figure["sentences_per_s"] / ceilings[name]
        target = f">= {TARGETS[name]:.0%}" if name in TARGETS else ""
        print(f"{name:40s}  {ratio:14.0%}  {target}")
    sequential = figures["sequential x 1 sentence"]["p50_ms"]
    print(f"sequential p50: {sequential:.1f} ms (target <= 20 ms)")


if __name__ == "__main__":
    main()
