"""Bulk jobs (issue 37) on all-MiniLM-L6-v2: does a batch use only idle capacity, does it use all of it, and what
does its durable state cost. The figures are docs/bulk-jobs.md's "Figures".

    python bench/batch_jobs.py [--lines 2000] [--big-lines 50000] [--seconds 20] [--env NAME=VALUE ...]

One production-mode server, jobs on SQLite in its BentoML home; lines of LINE_INPUTS short sentences, the same
bodies online and in batches.
1. Online ceiling: the lines sent online by IN_FLIGHT_LEVELS closed-loop clients for `--seconds`: the best inputs/s.
2. A batch of `--lines` alone, from upload to `completed` and from 10 % to 90 % done: against the online best.
3. Single sentences in an open loop (INTERACTIVE_RATE a second), alone and beside a `--big-lines` batch: p99
   against p99 alone x 1.5 + one pass (the batch's mean forward pass, from /metrics).
4. In process: the job store's claims and stores on SQLite per line, as a share of a batch line's time in part 2.
No assertion on timing: figures printed, targets marked met or NOT met.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import LoadWatch, corpus, summed_metrics  # noqa: E402
from bench.server import closed_loop, free_port, start_server, stop_server  # noqa: E402
from testkit.batches import jsonl, request_line  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
LINE_INPUTS = 4
IN_FLIGHT_LEVELS = (4, 8, 16, 32)
INTERACTIVE_RATE = 5.0  # requests a second


def line_bodies(count: int, seed: int) -> list[dict]:
    texts = corpus(count * LINE_INPUTS, 8, 20, seed=seed)
    return [{"model": MODEL, "input": texts[i * LINE_INPUTS : (i + 1) * LINE_INPUTS]} for i in range(count)]


def batch_file(bodies: list[dict]) -> bytes:
    return jsonl([request_line(f"line-{i}", body) for i, body in enumerate(bodies)])


def submit(url: str, bodies: list[dict]) -> str:
    upload = httpx.post(
        f"{url}/v1/files", files={"file": ("in.jsonl", batch_file(bodies))}, data={"purpose": "batch"}, timeout=300
    ).json()
    batch = httpx.post(
        f"{url}/v1/batches",
        json={"input_file_id": upload["id"], "endpoint": "/v1/embeddings", "completion_window": "24h"},
        timeout=60,
    ).json()
    return batch["id"]


def batch_state(url: str, batch_id: str) -> dict:
    return httpx.get(f"{url}/v1/batches/{batch_id}", timeout=30).json()


def online_rate(url: str, bodies: list[dict], in_flight: int, seconds: float) -> float:
    """Inputs a second from `in_flight` closed-loop clients sending the lines' inputs, a line a request."""
    texts = [text for body in bodies for text in body["input"]]

    def line(batch: list[str]) -> tuple[str, dict]:
        return "/v1/embeddings", {"model": MODEL, "input": batch}

    return asyncio.run(closed_loop(url, line, texts, seconds, in_flight, LINE_INPUTS))[0]


def online_ceiling(url: str, bodies: list[dict], seconds: float) -> float:
    print("1. online ceiling (inputs/s by clients in flight):", flush=True)
    rates = {}
    for in_flight in IN_FLIGHT_LEVELS:
        rates[in_flight] = online_rate(url, bodies, in_flight, seconds)
        print(f"   {in_flight:>3} in flight: {rates[in_flight]:7.1f}", flush=True)
    return max(rates.values())


def batch_alone(url: str, bodies: list[dict], best_online: float, pid: int) -> float:
    """Seconds per line of a batch running alone."""
    progress: list[tuple[float, int]] = []  # (seconds since upload, lines done)
    with LoadWatch(pid) as watch:
        started = time.perf_counter()
        batch_id = submit(url, bodies)
        while (state := batch_state(url, batch_id))["status"] not in ("completed", "failed", "cancelled"):
            progress.append((time.perf_counter() - started, state["request_counts"]["completed"]))
            time.sleep(0.1)
        elapsed = time.perf_counter() - started
    assert state["status"] == "completed" and state["request_counts"]["failed"] == 0, state
    rate = len(bodies) * LINE_INPUTS / elapsed
    # Past the fixed costs (upload, validation, the first and last chunks, finalization): from 10 % to 90 % done.
    (t0, n0), (t1, n1) = (next(p for p in progress if p[1] >= share * len(bodies)) for share in (0.1, 0.9))
    steady = (n1 - n0) * LINE_INPUTS / (t1 - t0)
    print(
        f"2. a batch of {len(bodies)} lines alone: {elapsed:.1f} s from upload to completed, {rate:.1f} inputs/s "
        f"= {rate / best_online:.2f} x the online best; from 10 % to 90 % done {steady:.1f} inputs/s = "
        f"{steady / best_online:.2f} x (target >= 0.9: {'met' if rate >= 0.9 * best_online else 'NOT met'} end to "
        f"end, {'met' if steady >= 0.9 * best_online else 'NOT met'} steady); other processes used "
        f"{watch.other_cores:.2f} cores",
        flush=True,
    )
    return elapsed / len(bodies)


async def interactive_latencies(url: str, seconds: float) -> list[float]:
    """Milliseconds of single-sentence requests sent INTERACTIVE_RATE a second (an open loop)."""
    texts = corpus(int(seconds * INTERACTIVE_RATE) + 1, 8, 20, seed=99)
    latencies: list[float] = []

    async def one(session: aiohttp.ClientSession, text: str) -> None:
        started = time.perf_counter()
        async with session.post(f"{url}/v1/embeddings", json={"model": MODEL, "input": text}) as response:
            assert response.status == 200, await response.text()
            await response.read()
        latencies.append((time.perf_counter() - started) * 1000)

    async with aiohttp.ClientSession() as session:
        tasks = []
        for text in texts:
            tasks.append(asyncio.create_task(one(session, text)))
            await asyncio.sleep(random.expovariate(INTERACTIVE_RATE))
        await asyncio.gather(*tasks)
    return latencies


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def forward_seconds(url: str) -> tuple[float, float]:
    """(sum, count) of the model services' forward passes so far."""
    names = ("embento_model_forward_seconds_sum", "embento_model_forward_seconds_count")
    found = summed_metrics(httpx.get(f"{url}/metrics", timeout=30).text, names)
    return found[names[0]], found[names[1]]


def interactive(url: str, big_lines: int, seconds: float) -> None:
    alone = asyncio.run(interactive_latencies(url, seconds))
    batch_id = submit(url, line_bodies(big_lines, seed=7))
    while (state := batch_state(url, batch_id))["status"] != "in_progress" or not state["request_counts"]["completed"]:
        time.sleep(0.2)
    before_lines, before_pass = state["request_counts"]["completed"], forward_seconds(url)
    beside = asyncio.run(interactive_latencies(url, seconds))
    after_pass = forward_seconds(url)
    done = batch_state(url, batch_id)["request_counts"]["completed"] - before_lines
    httpx.post(f"{url}/v1/batches/{batch_id}/cancel", timeout=30)
    passes = after_pass[1] - before_pass[1]
    one_pass_ms = (after_pass[0] - before_pass[0]) / passes * 1000 if passes else float("nan")
    target = p99(alone) * 1.5 + one_pass_ms
    print(
        f"3. interactive single sentences, {INTERACTIVE_RATE:g}/s for {seconds:g} s: p50 {statistics.median(alone):.1f}"
        f" ms, p99 {p99(alone):.1f} ms alone; beside a {big_lines}-line batch p50 {statistics.median(beside):.1f} "
        f"ms, p99 {p99(beside):.1f} ms (target <= {p99(alone):.1f} x 1.5 + one pass {one_pass_ms:.1f} ms = "
        f"{target:.1f} ms: {'met' if p99(beside) <= target else 'NOT met'}); the batch did {done} lines "
        f"({done * LINE_INPUTS / seconds:.0f} inputs/s) meanwhile; the slowest beside it: "
        f"{', '.join(f'{ms:.0f}' for ms in sorted(beside)[-5:])} ms",
        flush=True,
    )


def state_writes(seconds_per_line: float, output_bytes: int) -> None:
    """The job store's own cost per line on SQLite, in this process."""
    from config.settings import JobSettings
    from gateway.jobs.leases import ChunkLeases, StepLeases
    from gateway.jobs.lines import parse_batch_file
    from gateway.jobs.store import JobStore

    lines = 2048
    with tempfile.TemporaryDirectory() as folder:
        settings = JobSettings()
        store = JobStore(settings, Path(folder))
        upload = store.add_file("in.jsonl", "batch", batch_file(line_bodies(lines, seed=3)))
        batch_id = store.create_batch("/v1/embeddings", upload["id"], "24h", None)["id"]
        StepLeases(store).claim_step("bench")
        parsed, problems = parse_batch_file(StepLeases(store).upload_bytes(upload["id"]), "/v1/embeddings", lines)
        StepLeases(store).validated(batch_id, "bench", parsed, problems)
        output = "x" * output_bytes
        started = time.perf_counter()
        while (chunk := ChunkLeases(store).claim_chunk("bench")) is not None:
            ChunkLeases(store).store_chunk(chunk, "bench", [(line.number, True, output) for line in chunk.lines])
        per_line = (time.perf_counter() - started) / lines
    share = per_line / seconds_per_line
    print(
        f"4. SQLite state writes: {per_line * 1e6:.0f} us a line ({settings.chunk_lines}-line chunks, {output_bytes} "
        f"bytes of output a line) = {share:.1%} of a batch line's {seconds_per_line * 1e3:.2f} ms (target <= 5 %: "
        f"{'met' if share <= 0.05 else 'NOT met'})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--big-lines", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for the server, e.g. EMBENTO_JOBS_LINES_IN_FLIGHT=8"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = dict(setting.split("=", 1) for setting in args.env)
        process = start_server(port, EMBENTO_MODEL_ID=MODEL, BENTOML_HOME=home, **env)
        try:
            bodies = line_bodies(args.lines, seed=1)
            output_bytes = len(httpx.post(f"{url}/v1/embeddings", json=bodies[0], timeout=60).content) + 120
            online_rate(url, bodies, 8, 3)  # warm
            best = online_ceiling(url, bodies, args.seconds)
            seconds_per_line = batch_alone(url, bodies, best, process.pid)
            interactive(url, args.big_lines, args.seconds)
        finally:
            stop_server(process)
    state_writes(seconds_per_line, output_bytes)


if __name__ == "__main__":
    main()
