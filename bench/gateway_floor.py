"""The gateway's CPU per request against the framework's floors, in one run; the method and figures are
docs/architecture.md's "The gateway against the framework's floor".

    python bench/gateway_floor.py [--seconds 6] [--runs 3] [--simulated] [--compare CHECKOUT] [--profile-dir DIR]

Embento, a BentoML echo service (also on its two other routes) and a bare Starlette echo (bench/echo_services.py)
up at once; 32 clients send bodies of 1 and 32 sentences; each server's HTTP process's CPU from /proc over the
requests answered (Embento's model service not counted). Runs interleave the servers; medians of `--runs`.
`--profile-dir`: py-spy (`pip install py-spy`) records the gateway during each Embento run (SVG and speedscope).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.echo_services import ANSWER_AS_RESPONSE, MOUNTED, PATH  # noqa: E402
from bench.load import corpus as short_sentences  # noqa: E402
from bench.server import ROOT, closed_loop, free_port, start_server, stop_server, wait_until_ready  # noqa: E402
from bench.simulated_device import device_env  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
CLIENTS = 32
SENTENCES_PER_REQUEST = (1, 32)
WARM_UP_S = 2.0


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    port: int
    marker: str | None  # a cmdline fragment naming the HTTP worker; None: the started process itself
    path: str = PATH

    def http_processes(self) -> list[psutil.Process]:
        root = psutil.Process(self.process.pid)
        if self.marker is None:
            return [root]
        return [p for p in root.children(recursive=True) if self.marker in " ".join(p.cmdline())]

    def cpu_seconds(self) -> float:
        return sum(sum(p.cpu_times()[:2]) for p in self.http_processes())


def start_bare(port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "uvicorn", "bench.echo_services:bare_app", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--http", "httptools", "--loop", "uvloop", "--no-access-log"]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    return wait_until_ready(process, f"http://127.0.0.1:{port}/readyz")


def start_embento(port: int, simulated: bool, cwd: Path = ROOT) -> subprocess.Popen:
    """MiniLM on this CPU, or (`simulated`) behind bench/simulated_device.py's small device, whose model service
    costs little CPU: the gateway is then the bound, and its figures steadier."""
    if not simulated:
        return start_server(port, cwd=cwd, EMBENTO_MODEL_ID=MINILM)
    settings = device_env("small", Path(f"/tmp/embento-floor-{port}")) | {
        "EMBENTO_DEVICE": "cuda",
        "EMBENTO_MAX_CONCURRENT_REQUESTS": "4096",
    }
    return start_server(port, target="bench.simulated_service:Gateway", cwd=cwd, EMBENTO_MODEL_ID=MINILM, **settings)


def start_servers(compare: Path | None, simulated: bool) -> list[Server]:
    """Embento, the two floors, and with `compare` Embento served from that checkout (an earlier commit)."""
    ports = [free_port() for _ in range(4)]
    echo = start_server(ports[1], target="bench.echo_services:EchoBento")
    servers = [
        Server("Embento gateway", start_embento(ports[0], simulated), ports[0], "--service-name Embento"),
        Server("BentoML 1.4 echo", echo, ports[1], "--service-name EchoBento"),
        Server("Starlette + uvicorn echo", start_bare(ports[2]), ports[2], None),
        Server("BentoML echo, answer as a Response", echo, ports[1], "--service-name EchoBento", ANSWER_AS_RESPONSE),
        Server("BentoML echo, mounted ASGI route", echo, ports[1], "--service-name EchoBento", MOUNTED),
    ]
    if compare is not None:
        earlier = start_embento(ports[3], simulated, compare)
        servers.append(Server(f"Embento gateway at {compare.name}", earlier, ports[3], "--service-name Embento"))
    return servers


@contextlib.contextmanager
def profiled(server: Server, folder: Path | None, label: str) -> Iterator[None]:
    """py-spy on the server's HTTP process while the block runs (nothing without a folder)."""
    if folder is None:
        yield
        return
    record = f"py-spy record --pid {server.http_processes()[0].pid} --rate 250 --gil --nonblocking".split()
    outputs = (("flamegraph", f"{folder}/{label}.svg"), ("speedscope", f"{folder}/{label}.json"))
    spies = [subprocess.Popen([*record, "--format", fmt, "--output", out]) for fmt, out in outputs]
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)


def measure(
    server: Server, per_request: int, seconds: float, corpus: list[str], profile: contextlib.AbstractContextManager
) -> tuple[float, float]:
    """(requests/s, CPU ms per request of the server's HTTP process), with `profile` around the measured part."""
    url = f"http://127.0.0.1:{server.port}"

    def request_for(batch: list[str]) -> tuple[str, dict]:
        return server.path, {"model": MINILM, "input": batch}

    asyncio.run(closed_loop(url, request_for, corpus, WARM_UP_S, CLIENTS, per_request))
    with profile:
        cpu0, started = server.cpu_seconds(), time.perf_counter()
        rate, _ = asyncio.run(closed_loop(url, request_for, corpus, seconds, CLIENTS, per_request))
        wall = time.perf_counter() - started
    requests = rate * wall / per_request
    return rate / per_request, 1000 * (server.cpu_seconds() - cpu0) / max(1.0, requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile-dir", type=Path, help="py-spy flame graphs of the gateway, one per scenario")
    parser.add_argument("--compare", type=Path, help="another checkout (an earlier commit), served and measured too")
    parser.add_argument("--simulated", action="store_true", help="Embento on the simulated small device, not MiniLM")
    args = parser.parse_args()
    if args.profile_dir is not None:
        if shutil.which("py-spy") is None:
            raise SystemExit("--profile-dir needs py-spy on PATH: pip install py-spy")
        args.profile_dir.mkdir(parents=True, exist_ok=True)
    corpus = short_sentences(4096, 8, 20)  # 8-20 words, as bench/run_all.py's short scenarios
    servers = start_servers(args.compare, args.simulated)
    figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        for run in range(args.runs):
            for per_request in SENTENCES_PER_REQUEST:
                for server in servers:
                    folder = args.profile_dir if server is servers[0] and run == 0 else None
                    profile = profiled(server, folder, f"gateway-x{per_request}")
                    figure = measure(server, per_request, args.seconds, corpus, profile)
                    figures.setdefault((server.name, per_request), []).append(figure)
    finally:
        for process in {id(s.process): s.process for s in servers}.values():
            stop_server(process)
    report(servers, figures, args.runs)


def report(servers: list[Server], figures: dict[tuple[str, int], list[tuple[float, float]]], runs: int) -> None:
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {CLIENTS} clients; median of {runs}")
    print("server | sentences/request | requests/s | HTTP-process CPU ms/request | x BentoML echo | x bare echo")
    for per_request in SENTENCES_PER_REQUEST:
        medians = {
            s.name: tuple(statistics.median(f[i] for f in figures[(s.name, per_request)]) for i in (0, 1))
            for s in servers
        }
        echo, bare = medians[servers[1].name][1], medians[servers[2].name][1]
        for name, (rate, cpu_ms) in medians.items():
            print(f"{name} | {per_request} | {rate:.0f} | {cpu_ms:.3f} | {cpu_ms / echo:.2f} | {cpu_ms / bare:.1f}")


if __name__ == "__main__":
    main()
