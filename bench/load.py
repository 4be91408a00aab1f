"""Closed-loop load generator for any OpenAI-compatible embeddings URL (loopback only).

    python bench/load.py --url http://127.0.0.1:3000/v1/embeddings --model NAME [--pid SERVER_PID]

Scenarios: 32 in flight x 1 sentence, 8 x 10 sentences, one at a time, 8 x 10 mixed-length (5-200 words).
Prints sentences/s, latency percentiles, errors and the server's resident memory (whole process tree).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import psutil

WORDS = (
    "data privacy fixed cost cluster embedding vector search query passage model server batch token "
    "latency throughput memory request response network engineer platform team document index"
).split()


@dataclass(frozen=True)
class Scenario:
    name: str
    in_flight: int
    sentences_per_request: int
    min_words: int
    max_words: int


SCENARIOS = (
    Scenario("32 in flight x 1 sentence", 32, 1, 8, 20),
    Scenario("8 in flight x 10 sentences", 8, 10, 8, 20),
    Scenario("sequential x 1 sentence", 1, 1, 8, 20),
    Scenario("8 in flight x 10 mixed (5-200 words)", 8, 10, 5, 200),
)


def corpus(count: int, min_words: int, max_words: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))) for _ in range(count)]


@dataclass
class Result:
    latencies_ms: list[float] = field(default_factory=list)
    sentences: int = 0
    errors: int = 0
    elapsed_s: float = 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summed_metrics(text: str, names: Iterable[str], labels: dict[str, str] | None = None) -> dict[str, float]:
    """Each of `names` in a /metrics page, summed over its samples (models, services, processes); with `labels`,
    over those whose labels include them."""
    found = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found and (not labels or labels.items() <= dict(re.findall(r'(\w+)="([^"]*)"', line)).items()):
            found[name] += float(line.split()[-1])
    return found


def percentile(values: list[float], p: int) -> float:
    """The p-th percentile (inclusive: the 50th is the median); nan without values."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def cpu_name() -> str:
    found = (
        line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line
    )
    return next(found, platform.processor() or platform.machine())


def machine() -> str:
    return f"{cpu_name()}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable)"


def git_commit(checkout: Path) -> str:
    """The checkout's short HEAD, and whether tracked files differ from it."""

    def git(*command: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *command], capture_output=True, text=True).stdout.strip()

    dirty = " with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)") + dirty


def require_loopback(url: str) -> None:
    host = urlparse(url).hostname or ""
    address = ipaddress.ip_address(socket.gethostbyname(host))
    if not address.is_loopback:
        raise SystemExit(f"refusing to load {host}: this benchmark only targets loopback addresses")


Body = Callable[[list[str]], dict]  # one request's texts -> its JSON body


def embeddings_body(model: str) -> Body:
    return lambda texts: {"input": texts, "model": model}


async def run_scenario(url: str, body: Body, scenario: Scenario, duration_s: float, max_requests: int) -> Result:
    """Closed loop: `in_flight` clients, each sending its next request as soon as the last one returns."""
    texts = corpus(2000, scenario.min_words, scenario.max_words)
    result = Result()
    deadline = time.perf_counter() + duration_s
    sent = 0
    connector = aiohttp.TCPConnector(limit=scenario.in_flight)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:

        async def worker(offset: int) -> None:
            nonlocal sent
            position = offset * 97
            while time.perf_counter() < deadline and sent < max_requests:
                sent += 1
                batch = [texts[(position + i) % len(texts)] for i in range(scenario.sentences_per_request)]
                position += scenario.sentences_per_request
                started = time.perf_counter()
                try:
                    async with http.post(url, json=body(batch)) as response:
                        await response.read()
                        ok = response.status == 200
                except aiohttp.ClientError:
                    ok = False
                result.latencies_ms.append((time.perf_counter() - started) * 1000)
                if ok:
                    result.sentences += len(batch)
                else:
                    result.errors += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(scenario.in_flight)))
        result.elapsed_s = time.perf_counter() - started
    return result


class LoadWatch:
    """CPU that processes other than the trees of `pids` and this benchmark used during a run, in cores: a run
    beside another load means little on 2 cores."""

    def __init__(self, *pids: int) -> None:
        found = {psutil.Process().pid: psutil.Process()}
        for pid in pids:
            root = psutil.Process(pid)
            found |= {process.pid: process for process in [root, *root.children(recursive=True)]}
        self.processes = list(found.values())

    def _ours(self) -> float:
        total = 0.0
        for process in self.processes:
            try:
                times = process.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
        return total

    def __enter__(self) -> LoadWatch:
        system = psutil.cpu_times()
        self.started = (time.monotonic(), system.user + system.system + system.nice, self._ours())
        return self

    def __exit__(self, *_: object) -> None:
        system = psutil.cpu_times()
        wall, busy, ours = time.monotonic(), system.user + system.system + system.nice, self._ours()
        self.other_cores = max(0.0, (busy - self.started[1]) - (ours - self.started[2])) / (wall - self.started[0])


def tree_rss_mb(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


async def warm_up(url: str, body: Body) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:

        async def one(seed: int) -> None:
            async with http.post(url, json=body(corpus(4, 5, 40, seed=seed))) as response:
                await response.read()

        await asyncio.gather(*(one(i) for i in range(32)))


def report(scenario: Scenario, result: Result, rss_mb: float, unit: str = "sent") -> dict[str, float]:
    rate = result.sentences / result.elapsed_s if result.elapsed_s else 0.0
    print(
        f"{scenario.name:40s} {rate:9.1f} {unit}/s  p50 {result.percentile(0.5):7.1f} ms  "
        f"p95 {result.percentile(0.95):7.1f} ms  p99 {result.percentile(0.99):7.1f} ms  "
        f"errors {result.errors}  requests {len(result.latencies_ms)}  server RSS {rss_mb:7.0f} MB"
    )
    return {
        "sentences_per_s": rate,
        "p50_ms": result.percentile(0.5),
        "p95_ms": result.percentile(0.95),
        "p99_ms": result.percentile(0.99),
        "errors": result.errors,
        "rss_mb": rss_mb,
    }


async def run_all(
    url: str,
    body: Body,
    pid: int | None,
    duration_s: float,
    max_requests: int,
    scenarios: tuple[Scenario, ...] = SCENARIOS,
    unit: str = "sent",
) -> dict[str, dict]:
    require_loopback(url)
    await warm_up(url, body)
    figures = {}
    for scenario in scenarios:
        result = await run_scenario(url, body, scenario, duration_s, max_requests)
        figures[scenario.name] = report(scenario, result, tree_rss_mb(pid), unit)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--pid", type=int, help="server process to measure (its whole tree)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per scenario")
    parser.add_argument("--max-requests", type=int, default=20000, help="hard bound per scenario")
    args = parser.parse_args()
    asyncio.run(run_all(args.url, embeddings_body(args.model), args.pid, args.duration, args.max_requests))


if __name__ == "__main__":
    main()
