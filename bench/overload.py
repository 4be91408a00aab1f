"""Overload: 200 connections in a closed loop against a server with a small admission budget. Figures:
docs/operations.md's "Limits and overload".

    python bench/overload.py [--seconds 10] [--connections 200] [--concurrency 8] [--queue 16]

wrk (Debian's `wrk`: a C load generator, so the client costs little of the shared cores) on `/livez` (the
ceiling), then on embeddings requests mostly refused (429): latency, rates, statuses, the server's RSS before and
after. Then one refusal's own cost: while a client holds the model queue full, another sends requests one at a
time and times the 429s (under 200 connections latency is mostly waiting behind the others: Little's law).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import tree_rss_mb  # noqa: E402
from server import free_port, start_server, stop_server  # noqa: E402

POST_SCRIPT = """wrk.method = "POST"
wrk.body = '{"input": ["a short sentence", "another one", "a third", "and a fourth"]}'
wrk.headers["Content-Type"] = "application/json"
"""


def run_wrk(url: str, seconds: int, connections: int, script: str | None = None) -> dict[str, str]:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    if script:
        command[1:1] = ["-s", script]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    found = {
        key: re.search(pattern, out)
        for key, pattern in (
            ("p50", r"50%\s+(\S+)"),
            ("p99", r"99%\s+(\S+)"),
            ("rate", r"Requests/sec:\s+(\S+)"),
            ("requests", r"(\d+) requests in"),
            ("non_2xx", r"Non-2xx or 3xx responses: (\d+)"),
        )
    }
    return {key: match.group(1) if match else "0" for key, match in found.items()}


def refusal_latency(url: str, seconds: float, queue: int) -> tuple[float, float, int]:
    """p50 and p99 (ms) of 429s met by one sequential client while the queue is held full, and their count."""
    long_text = " ".join(["word"] * 300)
    stop = threading.Event()

    def hold() -> None:
        with httpx.Client(timeout=120) as http:
            while not stop.is_set():
                http.post(f"{url}/v1/embeddings", json={"input": [long_text] * queue})

    holders = [threading.Thread(target=hold)]  # a second would spin on 429s of its own
    for thread in holders:
        thread.start()
    time.sleep(2)  # the queue is full from here on
    refusals: list[float] = []
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=120) as http:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            status = http.post(f"{url}/v1/embeddings", json={"input": ["a short sentence"]}).status_code
            if status == 429:
                refusals.append((time.perf_counter() - started) * 1000)
    stop.set()
    for thread in holders:
        thread.join()
    if not refusals:
        return float("nan"), float("nan"), 0
    refusals.sort()
    return refusals[len(refusals) // 2], refusals[int(len(refusals) * 0.99)], len(refusals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8, help="max_concurrent_requests")
    parser.add_argument("--queue", type=int, default=16, help="max_queued_items")
    args = parser.parse_args()
    port = free_port()
    process = start_server(
        port, EMBENTO_MAX_QUEUED_ITEMS=str(args.queue), EMBENTO_MAX_CONCURRENT_REQUESTS=str(args.concurrency)
    )
    url = f"http://127.0.0.1:{port}"
    try:
        rss_before = tree_rss_mb(process.pid)
        with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
            script.write(POST_SCRIPT)
            script.flush()
            ceiling = run_wrk(f"{url}/livez", args.seconds, args.connections)
            overload = run_wrk(f"{url}/v1/embeddings", args.seconds, args.connections, script.name)
        rss_after = tree_rss_mb(process.pid)
        p50, p99, refused = refusal_latency(url, args.seconds, args.queue)
    finally:
        stop_server(process)
    for name, figures in (("/livez (ceiling)", ceiling), ("/v1/embeddings, overloaded", overload)):
        print(
            f"{name:28s} p50 {figures['p50']:>9s}  p99 {figures['p99']:>9s}  {figures['rate']:>8s} req/s  "
            f"{figures['requests']} requests, {figures['non_2xx']} not 2xx"
        )
    print(f"one client, queue held full: {refused} refusals, p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    print(
        f"server RSS {rss_before:.0f} MB before, {rss_after:.0f} MB after ({(rss_after / rss_before - 1) * 100:+.1f} %)"
    )


if __name__ == "__main__":
    main()
