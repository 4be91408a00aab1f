"""Live queries beside indexing (issue 63): does a single-sentence query keep its latency while the server indexes,
and does the indexing keep its throughput while the queries run.

    python bench/live_beside_indexing.py [--model minilm|bert-base|simulated] [--speed large|small] [--seconds 15]
        [--tenants] [--checkout DIR] [--doc-words 30000] [--env NAME=VALUE ...]
    python bench/live_beside_indexing.py --pass-sizes [--model minilm|bert-base|simulated]
    python bench/live_beside_indexing.py --peaks [--checkout DIR] [--seconds 15]

One production-mode server (bench/server.py) with its jobs in a temporary BentoML home, serving one model:
`minilm` (all-MiniLM-L6-v2, the packaged one), `bert-base` (bench/base_checkpoint.py's BERT-base shape) or
`simulated` (bench/simulated_device.py's GPU-speed device, `--speed`, served through the real gateway as
bench.simulated_service:Gateway). `--checkout DIR` serves another checkout of the bundle (its parent commit in a
`git worktree`, for the "before" figures; for `simulated`, copy bench/simulated_*.py there first); the load always
comes from this file. `--tenants`: a keys file with tenants A and B (weight 1 each); the probe sends with A's key,
every background with B's. Without it every request is anonymous.

The probe: one single-sentence POST /v1/embeddings every PROBE_EVERY_S (an open loop: sent whether or not the last
was answered). The backgrounds, each saturating:
- B1 flood: FLOOD_CLIENTS closed-loop clients x FLOOD_SENTENCES short sentences a request (bench/load.py's
  corpus, 8-20 words): sentences/s answered;
- B2 long documents: LONG_CLIENTS closed-loop clients, each sending one `--doc-words`-word document a request
  with `long_input: "mean"`: tokens/s the model ran (/metrics `embento_model_tokens_total`, read every
  TOKEN_POLL_S and taken between the first and the last pass that ended in the window: it moves once a pass, and a
  pass takes seconds on a CPU), less the other clients' tokens (their answers' `usage`); documents/s (those over one
  document's tokens), and the mean latency they imply (LONG_CLIENTS / documents/s: each client always has one
  document in flight; a document takes longer than a window on a CPU, so those answered in it are few);
- B3 a bulk job: BULK_LINES lines of LINE_SENTENCES sentences through /v1/files and /v1/batches: lines done a
  second from the batch's `request_counts` over the window (x LINE_SENTENCES = sentences/s); cancelled after;
- B4 all three at once (the bulk job started first: it runs only in idle capacity).

Phases, `--seconds` each: the probe on the idle server; a long request alone (one client, LONG_TRIES documents in a
row, without the probe and then with it: each document's latency); then per background, kept running throughout:
WARM_S unrecorded, a window alone, a window with the probe. Between backgrounds the clients hang up, the batch is
cancelled and the server drains. Every non-200 answer is counted per window and printed.

Targets (issue 63), per background: probe p50 <= 2 x idle p50; probe p99 <= idle p99 + 100 ms on a CPU (+ 10 ms on
the simulated device); background throughput with the probe >= 0.85 x alone; a long request's latency with the
probe <= 1.2 x without. Printed too: the model's card fields about passes (any key holding "pass" or "budget"), its
batch size and token budget (/info), the machine and the commit served. `--pass-sizes` (no server): rows/s, tokens/s
and ms a pass against pass size, 1..64 short sentences and 1..64 chunks of CHUNK_TOKENS tokens, run as the model
service runs a pass (runners/pool.py: the model loaded on one thread with the service's CPU threads, a pass split
across the cores by models/inference/lanes.py).

`--peaks`: only the peak throughput with no probe, bench/run_all.py's 32 in flight x 1 sentence and 8 x 10, after a
warm-up each (the issue's target: >= 0.97 x the parent commit's, served with `--checkout`).

A long document on a CPU takes seconds (MiniLM) to a minute (BERT-base): past `request_timeout_s` (120 s) it is a
504, counted as such; raise it with `--env EMBENTO_REQUEST_TIMEOUT_S=600` and give `--seconds` room for BERT-base.
On a 2-core machine this script's clients share the cores with the server: each window prints the cores other
processes used meanwhile (bench/load.py's LoadWatch). The default run (MiniLM, 15 s windows) takes about 3 minutes
on 2 cores, `--seconds 5` (a smoke run) about 1.5. No assertion on timing: figures printed, targets marked met or NOT
met.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import SCENARIOS, LoadWatch, corpus, embeddings_body, run_scenario, summed_metrics  # noqa: E402
from bench.server import ROOT, free_port, start_server, stop_server  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
PROBE_EVERY_S = 0.2
FLOOD_CLIENTS, FLOOD_SENTENCES = 16, 10
LONG_CLIENTS, LONG_TRIES = 4, 2
BULK_LINES, LINE_SENTENCES = 20_000, 10
WARM_S = 3.0
DRAIN_TIMEOUT_S = 120.0
TOKEN_POLL_S = 0.25  # how often a window with long documents reads the tokens run
PASS_ROWS = (1, 2, 4, 8, 16, 32, 64)
CHUNK_TOKENS = 256
TARGET_P50_RATIO, TARGET_THROUGHPUT_RATIO, TARGET_LONG_RATIO = 2.0, 0.85, 1.2
TARGET_P99_MS = {"cpu": 100.0, "simulated": 10.0}
BACKGROUNDS = {"B1": ("flood",), "B2": ("long",), "B3": ("bulk",), "B4": ("bulk", "flood", "long")}
TERMINAL = ("completed", "failed", "cancelled", "expired")


@dataclass
class Answer:
    sent: float
    answered: float
    status: int  # 0: no HTTP answer
    tokens: int = 0  # usage.prompt_tokens
    problem: str = ""

    @property
    def ms(self) -> float:
        return (self.answered - self.sent) * 1000


@dataclass
class Server:
    """A served model and how to reach it."""

    url: str
    model: str  # the served name clients send
    pid: int
    probe_headers: dict[str, str]
    load_headers: dict[str, str]  # the backgrounds' (tenant B's with --tenants)


@dataclass
class Snapshot:
    at: float
    tokens: float  # embento_model_tokens_total, all models
    lines: int  # the bulk job's lines done (completed + failed)
    failed_lines: int


def token_rate(samples: list[tuple[float, float]]) -> float:
    """Tokens/s from (time, tokens run) readings. The counter moves once a pass, and a pass of long windows takes
    seconds on a CPU: the rate is read between the first and the last reading at which it moved, not over the
    window's ends (else one pass more or less is a large share of a window)."""
    moved = [samples[0]] + [now for before, now in zip(samples, samples[1:]) if now[1] != before[1]]
    if len(moved) >= 3:
        (t0, n0), (t1, n1) = moved[1], moved[-1]
        return (n1 - n0) / (t1 - t0)
    (t0, n0), (t1, n1) = samples[0], samples[-1]
    return (n1 - n0) / (t1 - t0)


async def read_tokens(session: aiohttp.ClientSession, server: Server, into: list[tuple[float, float]]) -> None:
    """(time, tokens run) every TOKEN_POLL_S into `into`, until cancelled."""
    while True:
        await asyncio.sleep(TOKEN_POLL_S)
        found = await metric_sums(session, server, "embento_model_tokens_total")
        into.append((time.perf_counter(), found["embento_model_tokens_total"]))


@dataclass
class Window:
    """What one recorded window saw."""

    seconds: float
    probe: list[Answer]
    flood: list[Answer]  # answered within the window
    long: list[Answer]
    token_rate: float  # tokens/s the model ran (token_rate's reading)
    lines: int
    failed_lines: int
    other_cores: float


@dataclass
class Running:
    """A background under way: its parts, its client tasks, their answers, and its bulk job."""

    parts: tuple[str, ...] = ()
    tasks: list[asyncio.Task] = field(default_factory=list)
    flood: list[Answer] = field(default_factory=list)
    long: list[Answer] = field(default_factory=list)
    batch_id: str | None = None


@dataclass
class Workload:
    """The bodies every phase sends, built once."""

    probe_texts: list[str]
    flood_texts: list[str]
    documents: list[str]
    bulk_file_id: str
    line_tokens: float  # tokens of one bulk line (measured on a sample)
    document_tokens: float = float("nan")  # tokens of one long document (from the long-alone phase)


# ---------------------------------------------------------------- requests


async def post(session: aiohttp.ClientSession, url: str, body: dict, headers: dict[str, str]) -> Answer:
    """One POST /v1/embeddings: when it was sent and answered, its status and tokens; never raises."""
    sent = time.perf_counter()
    try:
        async with session.post(f"{url}/v1/embeddings", json=body, headers=headers) as response:
            text = await response.text()
            status = response.status
    except (TimeoutError, aiohttp.ClientError) as exc:
        return Answer(sent, time.perf_counter(), 0, problem=repr(exc))
    answered = time.perf_counter()
    if status != 200:
        return Answer(sent, answered, status, problem=text[:200])
    return Answer(sent, answered, status, json.loads(text)["usage"]["prompt_tokens"])


async def probe(session: aiohttp.ClientSession, server: Server, texts: list[str], stop: asyncio.Event) -> list[Answer]:
    """Single sentences every PROBE_EVERY_S (on a fixed clock) until `stop`, then every answer."""
    tasks, started = [], time.perf_counter()
    while not stop.is_set():
        body = {"model": server.model, "input": texts[len(tasks) % len(texts)]}
        tasks.append(asyncio.create_task(post(session, server.url, body, server.probe_headers)))
        wake = started + len(tasks) * PROBE_EVERY_S
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, wake - time.perf_counter()))
        except TimeoutError:
            pass
    return list(await asyncio.gather(*tasks))


async def closed_loop(
    session: aiohttp.ClientSession, server: Server, body_at: Callable[[int], dict], into: list[Answer]
) -> None:
    """Sends `body_at(0)`, `body_at(1)`, ... one after the other until cancelled."""
    at = 0
    while True:
        into.append(await post(session, server.url, body_at(at), server.load_headers))
        at += 1


# ---------------------------------------------------------------- server state


async def get_json(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Any:
    async with session.get(url, headers=headers) as response:
        return await response.json()


async def metric_sums(session: aiohttp.ClientSession, server: Server, *names: str) -> dict[str, float]:
    """Each metric summed over its labels (models, services, processes)."""
    async with session.get(f"{server.url}/metrics", headers=server.probe_headers) as response:
        return summed_metrics(await response.text(), names)


async def batch_counts(session: aiohttp.ClientSession, server: Server, batch_id: str | None) -> tuple[str, int, int]:
    """(status, lines done, lines failed) of a bulk job; ("", 0, 0) without one."""
    if batch_id is None:
        return "", 0, 0
    state = await get_json(session, f"{server.url}/v1/batches/{batch_id}", server.load_headers)
    counts = state["request_counts"]
    return state["status"], counts["completed"] + counts["failed"], counts["failed"]


async def snapshot(session: aiohttp.ClientSession, server: Server, running: Running) -> Snapshot:
    tokens = (await metric_sums(session, server, "embento_model_tokens_total"))["embento_model_tokens_total"]
    _, lines, failed = await batch_counts(session, server, running.batch_id)
    return Snapshot(time.perf_counter(), tokens, lines, failed)


async def drain(session: aiohttp.ClientSession, server: Server) -> None:
    """Until nothing waits on the model services and no token ran for a second (or DRAIN_TIMEOUT_S)."""
    deadline, last = time.perf_counter() + DRAIN_TIMEOUT_S, -1.0
    while time.perf_counter() < deadline:
        found = await metric_sums(session, server, "embento_queued_items", "embento_model_tokens_total")
        if found["embento_queued_items"] == 0 and found["embento_model_tokens_total"] == last:
            return
        last = found["embento_model_tokens_total"]
        await asyncio.sleep(1.0)
    print(f"   (the server was still busy {DRAIN_TIMEOUT_S:g} s after the background stopped)", flush=True)


# ---------------------------------------------------------------- bulk jobs


def bulk_lines(model: str) -> list[dict]:
    texts = corpus(BULK_LINES * LINE_SENTENCES, 8, 20, seed=7)
    return [{"model": model, "input": texts[i * LINE_SENTENCES : (i + 1) * LINE_SENTENCES]} for i in range(BULK_LINES)]


async def upload(session: aiohttp.ClientSession, server: Server, bodies: list[dict]) -> str:
    content = "\n".join(
        json.dumps({"custom_id": f"line-{i}", "method": "POST", "url": "/v1/embeddings", "body": body})
        for i, body in enumerate(bodies)
    ).encode()
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", content, filename="in.jsonl", content_type="application/jsonl")
    async with session.post(f"{server.url}/v1/files", data=form, headers=server.load_headers) as response:
        assert response.status == 200, await response.text()
        return (await response.json())["id"]


async def start_batch(session: aiohttp.ClientSession, server: Server, file_id: str) -> str:
    """A batch of the uploaded file, once it has lines done (or 120 s on)."""
    body = {"input_file_id": file_id, "endpoint": "/v1/embeddings", "completion_window": "24h"}
    async with session.post(f"{server.url}/v1/batches", json=body, headers=server.load_headers) as response:
        assert response.status == 200, await response.text()
        batch_id = (await response.json())["id"]
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        status, done, _ = await batch_counts(session, server, batch_id)
        if status in TERMINAL or (status == "in_progress" and done):
            break
        await asyncio.sleep(0.2)
    return batch_id


async def cancel_batch(session: aiohttp.ClientSession, server: Server, batch_id: str) -> None:
    """Cancels it and waits until it has stopped (its lines under way finish). A JSON body: aiohttp would send a
    bodiless POST as application/octet-stream, a 415."""
    url = f"{server.url}/v1/batches/{batch_id}/cancel"
    async with session.post(url, json={}, headers=server.load_headers) as response:
        if response.status != 200:
            raise RuntimeError(f"cancelling {batch_id}: {response.status} {await response.text()}")
    deadline = time.perf_counter() + DRAIN_TIMEOUT_S
    while (status := (await batch_counts(session, server, batch_id))[0]) not in TERMINAL:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{batch_id} still {status} {DRAIN_TIMEOUT_S:g} s after it was cancelled")
        await asyncio.sleep(0.5)


# ---------------------------------------------------------------- backgrounds


def document(words: int, seed: int) -> str:
    """`words` words of the corpus, as one text."""
    found: list[str] = []
    for sentence in corpus(words // 8 + 1, 8, 20, seed=seed):
        found.extend(sentence.split())
        if len(found) >= words:
            break
    return " ".join(found[:words])


def flood_body(server: Server, texts: list[str], client: int) -> Callable[[int], dict]:
    stride = FLOOD_CLIENTS * FLOOD_SENTENCES

    def body_at(at: int) -> dict:
        start = (client * FLOOD_SENTENCES + at * stride) % len(texts)
        return {"model": server.model, "input": [texts[(start + i) % len(texts)] for i in range(FLOOD_SENTENCES)]}

    return body_at


def long_body(server: Server, text: str) -> Callable[[int], dict]:
    return lambda at: {"model": server.model, "input": [text], "long_input": "mean"}


async def start_background(
    session: aiohttp.ClientSession, server: Server, work: Workload, parts: tuple[str, ...]
) -> Running:
    running = Running(parts)
    if "bulk" in parts:  # first: it runs only in idle capacity
        running.batch_id = await start_batch(session, server, work.bulk_file_id)
    if "flood" in parts:
        for client in range(FLOOD_CLIENTS):
            body_at = flood_body(server, work.flood_texts, client)
            running.tasks.append(asyncio.create_task(closed_loop(session, server, body_at, running.flood)))
    if "long" in parts:
        for client in range(LONG_CLIENTS):
            body_at = long_body(server, work.documents[client])
            running.tasks.append(asyncio.create_task(closed_loop(session, server, body_at, running.long)))
    await asyncio.sleep(WARM_S)
    return running


async def stop_background(session: aiohttp.ClientSession, server: Server, running: Running) -> None:
    """The clients hang up (the server drops their rows not yet run), the batch is cancelled, the server drains."""
    for task in running.tasks:
        task.cancel()
    await asyncio.gather(*running.tasks, return_exceptions=True)
    if running.batch_id is not None:
        await cancel_batch(session, server, running.batch_id)
    await drain(session, server)


async def window(
    session: aiohttp.ClientSession, server: Server, work: Workload, running: Running, seconds: float, with_probe: bool
) -> Window:
    """`seconds` of the background as it runs, with the probe or without."""
    with LoadWatch(server.pid) as watch:
        before = await snapshot(session, server, running)
        samples = [(before.at, before.tokens)]
        reading = asyncio.create_task(read_tokens(session, server, samples)) if "long" in running.parts else None
        stop = asyncio.Event()
        probing = asyncio.create_task(probe(session, server, work.probe_texts, stop)) if with_probe else None
        await asyncio.sleep(seconds)
        stop.set()
        answers = await probing if probing is not None else []
        if reading is not None:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
        after = await snapshot(session, server, running)

    def within(found: list[Answer]) -> list[Answer]:
        return [a for a in found if before.at <= a.answered <= after.at]

    return Window(
        after.at - before.at,
        answers,
        within(running.flood),
        within(running.long),
        token_rate([*samples, (after.at, after.tokens)]),
        after.lines - before.lines,
        after.failed_lines - before.failed_lines,
        watch.other_cores,
    )


# ---------------------------------------------------------------- figures


def ok(answers: list[Answer]) -> list[Answer]:
    return [a for a in answers if a.status == 200]


def p50(answers: list[Answer]) -> float:
    found = [a.ms for a in ok(answers)]
    return statistics.median(found) if found else float("nan")


def p99(answers: list[Answer]) -> float:
    found = [a.ms for a in ok(answers)]
    if len(found) < 2:
        return found[0] if found else float("nan")
    return statistics.quantiles(found, n=100, method="inclusive")[98]


def failures(label: str, answers: list[Answer]) -> str:
    bad = [a for a in answers if a.status != 200]
    if not bad:
        return ""
    statuses = sorted({a.status for a in bad})
    return f"; {label}: {len(bad)} not 200 ({', '.join(map(str, statuses))}; the first: {bad[0].problem[:120]})"


def rates(found: Window, work: Workload) -> dict[str, float]:
    """Each background's throughput in the window: flood sentences/s, long tokens/s and documents/s, bulk
    sentences/s. The long documents' tokens are the model's less every other client's."""
    flood_sentences = len(ok(found.flood)) * FLOOD_SENTENCES
    others = sum(a.tokens for a in ok(found.probe) + ok(found.flood)) + found.lines * work.line_tokens
    long_tokens = max(0.0, found.token_rate - others / found.seconds)
    return {
        "flood": flood_sentences / found.seconds,
        "long": long_tokens,
        "documents": long_tokens / work.document_tokens,
        "bulk": found.lines * LINE_SENTENCES / found.seconds,
    }


def describe(label: str, found: Window, work: Workload, parts: tuple[str, ...]) -> str:
    rate = rates(found, work)
    text = f"   {label:<14}"
    if found.probe:
        text += f" probe p50 {p50(found.probe):7.1f} ms, p99 {p99(found.probe):7.1f} ms ({len(found.probe)} sent);"
    if "flood" in parts:
        text += f" flood {rate['flood']:7.1f} sentences/s;"
    if "long" in parts:
        text += (
            f" long {rate['long']:7.0f} tokens/s = {rate['documents']:.3f} documents/s, so a mean latency of "
            f"{LONG_CLIENTS / rate['documents']:.1f} s ({LONG_CLIENTS} clients / documents/s); "
            + (
                f"measured {mean_ms(found.long) / 1000:.1f} s over the {len(ok(found.long))} answered in the window;"
                if ok(found.long)
                else "none answered in the window;"
            )
        )
    if "bulk" in parts:
        text += f" bulk {found.lines / found.seconds:6.1f} lines/s = {rate['bulk']:7.1f} sentences/s;"
    text += f" other processes {found.other_cores:.2f} cores"
    text += failures("probe", found.probe) + failures("flood", found.flood) + failures("long", found.long)
    if found.failed_lines:
        text += f"; bulk: {found.failed_lines} lines failed"
    return text


def mean_ms(answers: list[Answer]) -> float:
    found = [a.ms for a in ok(answers)]
    return statistics.mean(found) if found else float("nan")


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


# ---------------------------------------------------------------- phases


async def idle_phase(session: aiohttp.ClientSession, server: Server, work: Workload, seconds: float) -> Window:
    found = await window(session, server, work, Running(), seconds, with_probe=True)
    print(describe("idle", found, work, ()), flush=True)
    return found


async def long_alone(
    session: aiohttp.ClientSession, server: Server, work: Workload, with_probe: bool
) -> tuple[list[Answer], list[Answer]]:
    """LONG_TRIES long documents one after the other: their answers, and the probe's meanwhile."""
    stop = asyncio.Event()
    probing = asyncio.create_task(probe(session, server, work.probe_texts, stop)) if with_probe else None
    documents = []
    for index in range(LONG_TRIES):
        body = {"model": server.model, "input": [work.documents[index]], "long_input": "mean"}
        documents.append(await post(session, server.url, body, server.load_headers))
    stop.set()
    return documents, (await probing if probing is not None else [])


async def long_phase(session: aiohttp.ClientSession, server: Server, work: Workload) -> tuple[float, float]:
    """A long request's mean latency (ms) without and with the probe; learns the document's tokens."""
    print(f"long request alone ({LONG_TRIES} documents in a row, without the probe, then with it):", flush=True)
    figures = []
    for with_probe in (False, True):
        documents, probed = await long_alone(session, server, work, with_probe)
        answered = ok(documents)
        if answered:
            work.document_tokens = statistics.mean(a.tokens for a in answered)
        figures.append(mean_ms(documents))
        text = f"   {'with probe' if with_probe else 'alone':<14} {', '.join(f'{a.ms:.0f}' for a in answered)} ms"
        if probed:
            text += f"; probe p50 {p50(probed):.1f} ms, p99 {p99(probed):.1f} ms ({len(probed)} sent)"
        print(text + failures("long", documents) + failures("probe", probed), flush=True)
    return figures[0], figures[1]


async def background_phase(
    session: aiohttp.ClientSession, server: Server, work: Workload, name: str, seconds: float
) -> tuple[Window, Window]:
    """One background kept running: a window alone, then one with the probe."""
    parts = BACKGROUNDS[name]
    print(f"{name} ({' + '.join(parts)}):", flush=True)
    running = await start_background(session, server, work, parts)
    try:
        alone = await window(session, server, work, running, seconds, with_probe=False)
        print(describe("alone", alone, work, parts), flush=True)
        beside = await window(session, server, work, running, seconds, with_probe=True)
        print(describe("with probe", beside, work, parts), flush=True)
    finally:
        await stop_background(session, server, running)
    return alone, beside


async def prepare(session: aiohttp.ClientSession, server: Server, doc_words: int) -> Workload:
    """The bodies, the bulk file uploaded once, a bulk line's tokens; the server warmed."""
    bodies = bulk_lines(server.model)
    file_id = await upload(session, server, bodies)
    sample = await asyncio.gather(*(post(session, server.url, body, server.load_headers) for body in bodies[:32]))
    assert all(a.status == 200 for a in sample), [a.problem for a in sample if a.status != 200]
    work = Workload(
        corpus(2000, 8, 20, seed=99),
        corpus(4000, 8, 20, seed=11),
        [document(doc_words, seed=100 + i) for i in range(max(LONG_CLIENTS, LONG_TRIES))],
        file_id,
        statistics.mean(a.tokens for a in sample),
    )
    warm = {"model": server.model, "input": [work.documents[0][:5000]], "long_input": "mean"}
    await post(session, server.url, warm, server.load_headers)
    return work


def summary(
    idle: Window, found: dict[str, tuple[Window, Window]], long: tuple[float, float], work: Workload, p99_ms: float
) -> None:
    print(f"summary (idle probe p50 {p50(idle.probe):.1f} ms, p99 {p99(idle.probe):.1f} ms):", flush=True)
    for name, (alone, beside) in found.items():
        p50_ratio = ratio(p50(beside.probe), p50(idle.probe))
        p99_delta = p99(beside.probe) - p99(idle.probe)
        print(
            f"   {name}  probe p50 {p50(beside.probe):7.1f} ms = {p50_ratio:5.2f} x idle (<= {TARGET_P50_RATIO:g} x: "
            f"{verdict(p50_ratio <= TARGET_P50_RATIO)}); p99 {p99(beside.probe):7.1f} ms = idle {p99_delta:+.1f} ms "
            f"(<= +{p99_ms:g} ms: {verdict(p99_delta <= p99_ms)})",
            flush=True,
        )
        with_probe, without = rates(beside, work), rates(alone, work)
        for part in BACKGROUNDS[name]:
            share = ratio(with_probe[part], without[part])
            unit = "tokens/s" if part == "long" else "sentences/s"
            met = verdict(share >= TARGET_THROUGHPUT_RATIO) if without[part] else "n/a: none done alone"
            print(
                f"       {part:<6} {with_probe[part]:9.1f} {unit} with the probe / {without[part]:9.1f} alone = "
                f"{share:.2f} (>= {TARGET_THROUGHPUT_RATIO:g}: {met})",
                flush=True,
            )
    share = ratio(long[1], long[0])
    print(
        f"   long request alone: {long[1]:.0f} ms with the probe / {long[0]:.0f} ms without = {share:.2f} "
        f"(<= {TARGET_LONG_RATIO:g}: {verdict(share <= TARGET_LONG_RATIO)})",
        flush=True,
    )


async def peaks(server: Server, seconds: float) -> None:
    """The peak throughput with no probe (bench/run_all.py's 32 x 1 and 8 x 10 scenarios), which the scheduling must
    not cost: each after a warm-up of WARM_S, closed loop, anonymous."""
    body = embeddings_body(server.model)
    for scenario in (SCENARIOS[0], SCENARIOS[1]):
        await run_scenario(f"{server.url}/v1/embeddings", body, scenario, WARM_S, 10**6)
        result = await run_scenario(f"{server.url}/v1/embeddings", body, scenario, seconds, 10**6)
        rate = result.sentences / result.elapsed_s
        print(f"   peak {scenario.name}: {rate:7.1f} sentences/s, {result.errors} errors", flush=True)


async def measure(server: Server, args: argparse.Namespace, p99_ms: float) -> None:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await describe_server(session, server)
    if args.peaks:
        await peaks(server, args.seconds)
        return
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        work = await prepare(session, server, args.doc_words)
        idle = await idle_phase(session, server, work, args.seconds)
        long = await long_phase(session, server, work)
        found = {name: await background_phase(session, server, work, name, args.seconds) for name in BACKGROUNDS}
    summary(idle, found, long, work, p99_ms)


# ---------------------------------------------------------------- the server


def scheduling_fields(card: Any, prefix: str = "") -> dict[str, Any]:
    """The card's keys (at any depth) that hold "pass" or "budget"."""
    found: dict[str, Any] = {}
    if isinstance(card, dict):
        for key, value in card.items():
            if any(word in key.lower() for word in ("pass", "budget")):
                found[prefix + key] = value
            else:
                found |= scheduling_fields(value, f"{prefix}{key}.")
    return found


async def describe_server(session: aiohttp.ClientSession, server: Server) -> None:
    cards = await get_json(session, f"{server.url}/v1/models", server.probe_headers)
    card = next(c for c in cards["data"] if c["id"] == server.model)
    info = await get_json(session, f"{server.url}/info", server.probe_headers)
    model = next((m for m in info.get("models", []) if m.get("id") == server.model), {})
    passes = scheduling_fields(card) | scheduling_fields(model, "/info ") or "none (no key holds 'pass' or 'budget')"
    print(
        f"model {server.model}: backend {card.get('backend')}, device {model.get('device')}, batch_size "
        f"{model.get('batch_size')}, max_batch_tokens {model.get('max_batch_tokens')}; pass fields: {passes}",
        flush=True,
    )


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "unknown CPU",
    )
    return f"{cpu}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable)"


def commit(checkout: Path) -> str:
    """The checkout's short HEAD, and whether tracked files differ from it."""

    def git(*command: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *command], capture_output=True, text=True).stdout.strip()

    dirty = " with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)") + dirty


def write_keys(folder: Path) -> dict[str, str]:
    """A keys file holding the tenants A and B (weight 1, no limits); their secrets."""
    from config.keys_file import new_secret

    secrets = {"A": new_secret(), "B": new_secret()}
    entries = [
        {"name": name, "key_sha256": hashlib.sha256(secret.encode()).hexdigest(), "weight": 1}
        for name, secret in secrets.items()
    ]
    path = folder / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": entries}))
    path.chmod(0o600)
    return secrets


def served_model(name: str) -> tuple[str, str]:
    """(model_id, served name) of `--model`."""
    if name == "bert-base":
        from bench import base_checkpoint

        return str(base_checkpoint.build()), base_checkpoint.NAME
    return MINILM, MINILM


def server_settings(args: argparse.Namespace, folder: Path, model_id: str, served: str) -> dict[str, str]:
    """The environment of the server: its configuration file, home, and the simulated device's settings."""
    entry: dict[str, Any] = {"model_id": model_id, "served_model_name": served}
    config: dict[str, Any] = {"models": [entry]}
    if args.tenants:
        config["auth"] = {"keys_file": str(folder / "keys.yaml")}
    settings = dict(setting.split("=", 1) for setting in args.env)
    if args.model == "simulated":
        from bench.simulated_device import SPEEDS

        entry["device"] = "cuda"
        settings |= {"SIM_DEVICE": ",".join(map(str, SPEEDS[args.speed])), "SIM_STATS": str(folder / "sim-stats")}
    (folder / "embento.yaml").write_text(yaml.safe_dump(config))
    return {"EMBENTO_CONFIG": str(folder / "embento.yaml"), "BENTOML_HOME": str(folder / "home"), **settings}


def serve(args: argparse.Namespace) -> None:
    checkout = Path(args.checkout).resolve()
    target = "bench.simulated_service:Gateway" if args.model == "simulated" else "service:Gateway"
    if args.model == "simulated" and not (checkout / "bench" / "simulated_service.py").exists():
        raise SystemExit(f"{checkout} has no bench/simulated_service.py: copy bench/simulated_*.py there first")
    model_id, served = served_model(args.model)
    p99_ms = TARGET_P99_MS["simulated" if args.model == "simulated" else "cpu"]
    print(f"machine: {machine()}; commit served: {commit(checkout)} ({checkout}); load from {ROOT}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        secrets = write_keys(folder) if args.tenants else {}
        port = free_port()
        started = time.perf_counter()
        process = start_server(port, target=target, cwd=checkout, **server_settings(args, folder, model_id, served))
        try:
            print(f"server ready in {time.perf_counter() - started:.1f} s", flush=True)
            a, b = ({"Authorization": f"Bearer {secrets[t]}"} for t in "AB") if secrets else ({}, {})
            server = Server(f"http://127.0.0.1:{port}", served, process.pid, a, b)
            asyncio.run(measure(server, args, p99_ms))
        finally:
            stop_server(process)


# ---------------------------------------------------------------- --pass-sizes


def load_in_process(name: str, speed: str, folder: Path) -> tuple[Any, Any]:
    """(tokenizer, model), loaded as a model service loads them."""
    from config.settings import ModelConfig
    from models.inference.auto_backend import load_model
    from models.preprocessing.text_tokenizer import TextTokenizer
    from models.resolve import packaged_model_path

    model_id, served = served_model(name)
    checkpoint = packaged_model_path(MINILM) if model_id == MINILM else Path(model_id)
    cfg = ModelConfig(model_id=model_id, served_model_name=served)
    if name != "simulated":
        return TextTokenizer(checkpoint, cfg), load_model(checkpoint, cfg)
    from bench.simulated_device import SPEEDS, SimulatedEncoder

    os.environ |= {"SIM_DEVICE": ",".join(map(str, SPEEDS[speed])), "SIM_STATS": str(folder / "sim-stats")}
    return TextTokenizer(checkpoint, cfg), SimulatedEncoder(checkpoint, cfg)


def time_pass(runner: Callable[[list[list[int]]], None], pools: list[list[list[int]]]) -> float:
    """Mean seconds of one pass, cycling through `pools` (one pass unrecorded), for 1.5 s and 2 passes at least."""
    runner(pools[0])
    count, started = 0, time.perf_counter()
    while count < 2 or time.perf_counter() - started < 1.5:
        runner(pools[count % len(pools)])
        count += 1
    return (time.perf_counter() - started) / count


def pass_sizes(args: argparse.Namespace) -> None:
    from models.base import TokenizedText
    from models.inference.host import cpu_threads, set_cpu_threads
    from models.inference.lanes import Lanes, shares_cores

    torch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch")  # as runners/pool.py runs models
    threads = cpu_threads()
    torch_thread.submit(set_cpu_threads, threads).result()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, model = torch_thread.submit(load_in_process, args.model, args.speed, Path(tmp)).result()
        lanes = Lanes(threads if shares_cores(model.info) else 1)
        print(
            f"{args.model}: backend {model.info.backend}, device {model.info.device}, {lanes.count} lane(s); machine: "
            f"{machine()}; commit {commit(ROOT)}",
            flush=True,
        )

        def run(ids: list[list[int]]) -> None:
            lanes.run(
                lambda part: model.forward(TokenizedText.rows("m", [ids[i] for i in part])), [len(i) for i in ids]
            )

        short = tokenizer.encode_texts(corpus(4000, 8, 20, seed=5))
        chunk = tokenizer.encode_texts([document(CHUNK_TOKENS * 2, seed=6)])[0][:CHUNK_TOKENS]
        for label, pool in (("short sentences", short), (f"{CHUNK_TOKENS}-token chunks", [chunk] * 64)):
            print(f"passes of {label}:", flush=True)
            for rows in PASS_ROWS:
                pools = [pool[i : i + rows] for i in range(0, min(len(pool), 64 * 20), rows)][:20]
                seconds = torch_thread.submit(time_pass, run, pools).result()
                tokens = statistics.mean(sum(len(ids) for ids in batch) for batch in pools)
                print(
                    f"   {rows:>3} rows ({tokens:6.0f} tokens): {seconds * 1000:8.1f} ms a pass, {rows / seconds:7.0f} "
                    f"rows/s, {tokens / seconds:8.0f} tokens/s",
                    flush=True,
                )
    torch_thread.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("minilm", "bert-base", "simulated"), default="minilm")
    parser.add_argument("--speed", choices=("large", "small"), default="large", help="the simulated device's")
    parser.add_argument("--seconds", type=float, default=15.0, help="recorded seconds per window")
    parser.add_argument("--tenants", action="store_true", help="tenants A (the probe) and B (the backgrounds)")
    parser.add_argument("--checkout", default=str(ROOT), help="the checkout served (default: this one)")
    parser.add_argument("--doc-words", type=int, default=30_000, help="words of a long document")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    parser.add_argument("--pass-sizes", action="store_true", help="in process: throughput against pass size")
    parser.add_argument("--peaks", action="store_true", help="only the peak throughput: 32 x 1 and 8 x 10, no probe")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.pass_sizes:
        pass_sizes(args)
    else:
        serve(args)
    print(f"run took {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
