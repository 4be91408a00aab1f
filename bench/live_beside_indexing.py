"""Live queries beside indexing (issue 63): does a single-sentence query keep its latency while the server indexes,
and does the indexing keep its throughput meanwhile. The figures are docs/operations.md's "Serving queries beside
indexing".

    python bench/live_beside_indexing.py [--model minilm|bert-base|simulated] [--seconds 15] [--checkout DIR]
        [--doc-words 30000] [--env NAME=VALUE ...]
    python bench/live_beside_indexing.py --peaks [--checkout DIR] [--seconds 15]
    python bench/live_beside_indexing.py --pass-sizes [--model minilm|bert-base|simulated]

One production-mode server serving `minilm` (all-MiniLM-L6-v2), `bert-base` (bench/base_checkpoint.py) or
`simulated` (bench/simulated_device.py's "large" device behind the real gateway). `--checkout DIR` serves another
checkout (the parent commit, for "before"; for `simulated`, copy bench/simulated_*.py there first).

The probe sends one sentence every PROBE_EVERY_S (an open loop) beside each saturating background: B1 a flood of
FLOOD_CLIENTS closed-loop clients x FLOOD_SENTENCES sentences (sentences/s); B2 LONG_CLIENTS clients of one
`--doc-words` document each, `long_input: "mean"` (tokens/s the model ran, from /metrics, less the other clients'
tokens); B3 a bulk job of BULK_LINES lines (lines/s from its `request_counts`); B4 all three. Phases, `--seconds`
each: the probe alone; LONG_TRIES long documents in a row without and with the probe; then per background a window
alone and one with the probe, after WARM_S. Targets are marked met or NOT met (no assertion on timing); each window
prints the cores other processes used (bench/load.py's LoadWatch).

`--peaks`: bench/run_all.py's 32 x 1 and 8 x 10 with no probe. `--pass-sizes` (no server): rows/s and tokens/s
against pass size, run as the model service runs a pass (one thread, split across the cores by lanes).
A long document past `request_timeout_s` is a 504: for BERT-base pass `--env EMBENTO_REQUEST_TIMEOUT_S=600`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
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

from bench.load import (  # noqa: E402
    SCENARIOS,
    LoadWatch,
    corpus,
    embeddings_body,
    git_commit,
    machine,
    percentile,
    run_scenario,
    summed_metrics,
)
from bench.server import ROOT, free_port, start_server, stop_server  # noqa: E402
from testkit.batches import FINISHED, jsonl, request_line  # noqa: E402

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
    url: str
    model: str  # the served name clients send
    pid: int


@dataclass
class Snapshot:
    at: float
    tokens: float  # embento_model_tokens_total, all models
    lines: int  # the bulk job's lines done (completed + failed)
    failed_lines: int


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


# ---------------------------------------------------------------- requests and server state


async def post(session: aiohttp.ClientSession, url: str, body: dict) -> Answer:
    """One POST /v1/embeddings: when it was sent and answered, its status and tokens; never raises."""
    sent = time.perf_counter()
    try:
        async with session.post(f"{url}/v1/embeddings", json=body) as response:
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
        tasks.append(asyncio.create_task(post(session, server.url, body)))
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
        into.append(await post(session, server.url, body_at(at)))
        at += 1


async def metric_sums(session: aiohttp.ClientSession, server: Server, *names: str) -> dict[str, float]:
    """Each metric summed over its labels (models, services, processes)."""
    async with session.get(f"{server.url}/metrics") as response:
        return summed_metrics(await response.text(), names)


async def read_tokens(session: aiohttp.ClientSession, server: Server, into: list[tuple[float, float]]) -> None:
    """(time, tokens run) every TOKEN_POLL_S into `into`, until cancelled."""
    while True:
        await asyncio.sleep(TOKEN_POLL_S)
        found = await metric_sums(session, server, "embento_model_tokens_total")
        into.append((time.perf_counter(), found["embento_model_tokens_total"]))


def token_rate(samples: list[tuple[float, float]]) -> float:
    """Tokens/s from (time, tokens run) readings. The counter moves once a pass, and a pass of long windows takes
    seconds on a CPU: the rate is read between the first and the last reading at which it moved, not over the
    window's ends (else one pass more or less is a large share of a window)."""
    moved = [samples[0]] + [now for before, now in zip(samples, samples[1:]) if now[1] != before[1]]
    (t0, n0), (t1, n1) = (moved[1], moved[-1]) if len(moved) >= 3 else (samples[0], samples[-1])
    return (n1 - n0) / (t1 - t0)


async def batch_counts(session: aiohttp.ClientSession, server: Server, batch_id: str | None) -> tuple[str, int, int]:
    """(status, lines done, lines failed) of a bulk job; ("", 0, 0) without one."""
    if batch_id is None:
        return "", 0, 0
    async with session.get(f"{server.url}/v1/batches/{batch_id}") as response:
        state = await response.json()
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


async def upload(session: aiohttp.ClientSession, server: Server, bodies: list[dict]) -> str:
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    lines = [request_line(f"line-{i}", body) for i, body in enumerate(bodies)]
    form.add_field("file", jsonl(lines), filename="in.jsonl", content_type="application/jsonl")
    async with session.post(f"{server.url}/v1/files", data=form) as response:
        assert response.status == 200, await response.text()
        return (await response.json())["id"]


async def start_batch(session: aiohttp.ClientSession, server: Server, file_id: str) -> str:
    """A batch of the uploaded file, once it has lines done (or 120 s on)."""
    body = {"input_file_id": file_id, "endpoint": "/v1/embeddings", "completion_window": "24h"}
    async with session.post(f"{server.url}/v1/batches", json=body) as response:
        assert response.status == 200, await response.text()
        batch_id = (await response.json())["id"]
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        status, done, _ = await batch_counts(session, server, batch_id)
        if status in FINISHED or (status == "in_progress" and done):
            break
        await asyncio.sleep(0.2)
    return batch_id


async def cancel_batch(session: aiohttp.ClientSession, server: Server, batch_id: str) -> None:
    """Cancels it and waits until it has stopped (its lines under way finish). A JSON body: aiohttp would send a
    bodiless POST as application/octet-stream, a 415."""
    async with session.post(f"{server.url}/v1/batches/{batch_id}/cancel", json={}) as response:
        if response.status != 200:
            raise RuntimeError(f"cancelling {batch_id}: {response.status} {await response.text()}")
    deadline = time.perf_counter() + DRAIN_TIMEOUT_S
    while (status := (await batch_counts(session, server, batch_id))[0]) not in FINISHED:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{batch_id} still {status} {DRAIN_TIMEOUT_S:g} s after it was cancelled")
        await asyncio.sleep(0.5)


# ---------------------------------------------------------------- backgrounds


def document(words: int, seed: int) -> str:
    """`words` words of the corpus, as one text."""
    found: list[str] = []
    for sentence in corpus(words // 8 + 1, 8, 20, seed=seed):
        found.extend(sentence.split())
    return " ".join(found[:words])


def flood_body(server: Server, texts: list[str], client: int) -> Callable[[int], dict]:
    def body_at(at: int) -> dict:
        start = (client + at * FLOOD_CLIENTS) * FLOOD_SENTENCES
        return {"model": server.model, "input": [texts[(start + i) % len(texts)] for i in range(FLOOD_SENTENCES)]}

    return body_at


async def start_background(
    session: aiohttp.ClientSession, server: Server, work: Workload, parts: tuple[str, ...]
) -> Running:
    running = Running(parts)
    if "bulk" in parts:  # first: it runs only in idle capacity
        running.batch_id = await start_batch(session, server, work.bulk_file_id)
    loops: list[tuple[Callable[[int], dict], list[Answer]]] = []
    if "flood" in parts:
        loops += [(flood_body(server, work.flood_texts, client), running.flood) for client in range(FLOOD_CLIENTS)]
    if "long" in parts:
        for text in work.documents[:LONG_CLIENTS]:
            body = {"model": server.model, "input": [text], "long_input": "mean"}
            loops.append((lambda _, body=body: body, running.long))
    running.tasks = [asyncio.create_task(closed_loop(session, server, body_at, into)) for body_at, into in loops]
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


def ok_ms(answers: list[Answer]) -> list[float]:
    return [a.ms for a in answers if a.status == 200]


def p50(answers: list[Answer]) -> float:
    return percentile(ok_ms(answers), 50)


def p99(answers: list[Answer]) -> float:
    return percentile(ok_ms(answers), 99)


def mean_ms(answers: list[Answer]) -> float:
    found = ok_ms(answers)
    return statistics.mean(found) if found else float("nan")


def failures(label: str, answers: list[Answer]) -> str:
    bad = [a for a in answers if a.status != 200]
    if not bad:
        return ""
    statuses = sorted({a.status for a in bad})
    return f"; {label}: {len(bad)} not 200 ({', '.join(map(str, statuses))}; the first: {bad[0].problem[:120]})"


def rates(found: Window, work: Workload) -> dict[str, float]:
    """Each background's throughput in the window: flood sentences/s, long tokens/s, bulk sentences/s. The long
    documents' tokens are the model's less every other client's."""
    answered = [a for a in found.probe + found.flood if a.status == 200]
    others = sum(a.tokens for a in answered) + found.lines * work.line_tokens
    return {
        "flood": len(ok_ms(found.flood)) * FLOOD_SENTENCES / found.seconds,
        "long": max(0.0, found.token_rate - others / found.seconds),
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
        text += f" long {rate['long']:7.0f} tokens/s ({len(ok_ms(found.long))} documents answered in the window);"
    if "bulk" in parts:
        text += f" bulk {found.lines / found.seconds:6.1f} lines/s = {rate['bulk']:7.1f} sentences/s;"
    text += f" other processes {found.other_cores:.2f} cores"
    text += failures("probe", found.probe) + failures("flood", found.flood) + failures("long", found.long)
    return text + (f"; bulk: {found.failed_lines} lines failed" if found.failed_lines else "")


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


# ---------------------------------------------------------------- phases


async def long_phase(session: aiohttp.ClientSession, server: Server, work: Workload) -> tuple[float, float]:
    """A long request's mean latency (ms) without and with the probe."""
    print(f"long request alone ({LONG_TRIES} documents in a row, without the probe, then with it):", flush=True)
    figures = []
    for with_probe in (False, True):
        stop = asyncio.Event()
        probing = asyncio.create_task(probe(session, server, work.probe_texts, stop)) if with_probe else None
        documents = []
        for text in work.documents[:LONG_TRIES]:
            body = {"model": server.model, "input": [text], "long_input": "mean"}
            documents.append(await post(session, server.url, body))
        stop.set()
        probed = await probing if probing is not None else []
        figures.append(mean_ms(documents))
        text = (
            f"   {'with probe' if with_probe else 'alone':<14} {', '.join(f'{ms:.0f}' for ms in ok_ms(documents))} ms"
        )
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
    texts = corpus(BULK_LINES * LINE_SENTENCES, 8, 20, seed=7)
    step = LINE_SENTENCES
    bodies = [{"model": server.model, "input": texts[i : i + step]} for i in range(0, len(texts), step)]
    file_id = await upload(session, server, bodies)
    sample = await asyncio.gather(*(post(session, server.url, body) for body in bodies[:32]))
    assert all(a.status == 200 for a in sample), [a.problem for a in sample if a.status != 200]
    work = Workload(
        corpus(2000, 8, 20, seed=99),
        corpus(4000, 8, 20, seed=11),
        [document(doc_words, seed=100 + i) for i in range(max(LONG_CLIENTS, LONG_TRIES))],
        file_id,
        statistics.mean(a.tokens for a in sample),
    )
    warm = {"model": server.model, "input": [work.documents[0][:5000]], "long_input": "mean"}
    await post(session, server.url, warm)
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
    not cost: each after a warm-up of WARM_S, closed loop."""
    body = embeddings_body(server.model)
    for scenario in SCENARIOS[:2]:
        await run_scenario(f"{server.url}/v1/embeddings", body, scenario, WARM_S, 10**6)
        result = await run_scenario(f"{server.url}/v1/embeddings", body, scenario, seconds, 10**6)
        rate = result.sentences / result.elapsed_s
        print(f"   peak {scenario.name}: {rate:7.1f} sentences/s, {result.errors} errors", flush=True)


async def describe_server(session: aiohttp.ClientSession, server: Server) -> None:
    """What decides the passes: the card's backend and pass budget, /info's batch limits."""
    async with session.get(f"{server.url}/v1/models") as response:
        card = next(c for c in (await response.json())["data"] if c["id"] == server.model)
    async with session.get(f"{server.url}/info") as response:
        info = next((m for m in (await response.json()).get("models", []) if m.get("id") == server.model), {})
    print(
        f"model {server.model}: backend {card.get('backend')}, pass_budget_ms {card.get('pass_budget_ms')}, device "
        f"{info.get('device')}, batch_size {info.get('batch_size')}, max_batch_tokens {info.get('max_batch_tokens')}",
        flush=True,
    )


async def measure(server: Server, args: argparse.Namespace, p99_ms: float) -> None:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        await describe_server(session, server)
        if args.peaks:
            await peaks(server, args.seconds)
            return
        work = await prepare(session, server, args.doc_words)
        idle = await window(session, server, work, Running(), args.seconds, with_probe=True)
        print(describe("idle", idle, work, ()), flush=True)
        long = await long_phase(session, server, work)
        found = {name: await background_phase(session, server, work, name, args.seconds) for name in BACKGROUNDS}
    summary(idle, found, long, work, p99_ms)


# ---------------------------------------------------------------- the server


def served_model(name: str) -> tuple[str, str]:
    """(model_id, served name) of `--model`."""
    if name == "bert-base":
        from bench import base_checkpoint

        return str(base_checkpoint.build()), base_checkpoint.NAME
    return MINILM, MINILM


def server_settings(args: argparse.Namespace, folder: Path, model_id: str, served: str) -> dict[str, str]:
    """The environment of the server: its configuration file, home, and the simulated device's settings."""
    entry: dict[str, Any] = {"model_id": model_id, "served_model_name": served}
    settings = dict(setting.split("=", 1) for setting in args.env)
    if args.model == "simulated":
        from bench.simulated_device import device_env

        entry["device"] = "cuda"
        settings |= device_env("large", folder / "sim-stats")
    (folder / "embento.yaml").write_text(yaml.safe_dump({"models": [entry]}))
    return {"EMBENTO_CONFIG": str(folder / "embento.yaml"), "BENTOML_HOME": str(folder / "home"), **settings}


def serve(args: argparse.Namespace) -> None:
    checkout = Path(args.checkout).resolve()
    target = "bench.simulated_service:Gateway" if args.model == "simulated" else "service:Gateway"
    if args.model == "simulated" and not (checkout / "bench" / "simulated_service.py").exists():
        raise SystemExit(f"{checkout} has no bench/simulated_service.py: copy bench/simulated_*.py there first")
    model_id, served = served_model(args.model)
    p99_ms = TARGET_P99_MS["simulated" if args.model == "simulated" else "cpu"]
    print(f"machine: {machine()}; commit served: {git_commit(checkout)} ({checkout}); load from {ROOT}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        port, started = free_port(), time.perf_counter()
        settings = server_settings(args, Path(tmp), model_id, served)
        process = start_server(port, target=target, cwd=checkout, **settings)
        try:
            print(f"server ready in {time.perf_counter() - started:.1f} s", flush=True)
            asyncio.run(measure(Server(f"http://127.0.0.1:{port}", served, process.pid), args, p99_ms))
        finally:
            stop_server(process)


# ---------------------------------------------------------------- --pass-sizes


def load_in_process(name: str, folder: Path) -> tuple[Any, Any]:
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
    from bench.simulated_device import SimulatedEncoder, device_env

    os.environ |= device_env("large", folder / "sim-stats")
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
        tokenizer, model = torch_thread.submit(load_in_process, args.model, Path(tmp)).result()
        lanes = Lanes(threads if shares_cores(model.info) else 1)
        print(
            f"{args.model}: backend {model.info.backend}, device {model.info.device}, {lanes.count} lane(s); machine: "
            f"{machine()}; commit {git_commit(ROOT)}",
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
    parser.add_argument("--seconds", type=float, default=15.0, help="recorded seconds per window")
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
