"""Long inputs (issue 34): what windowing, late chunking and a 100k-token document cost on a real server.

    python bench/long_inputs.py [--quick] [--rounds N]

Serves the packaged sentence-transformers/all-MiniLM-L6-v2 (window L = 256 tokens; backend auto, ONNX Runtime
on a CPU) with a production-mode `bentoml serve` on loopback, builds its documents from load.py's words with the
model's own tokenizer, and prints:

1. `long_input: "mean"`: eight 8,000-token documents, 8 concurrent requests of one document each, in windows
   per second (a window: one 254-token cut of the document's content ids, framed [CLS] ... [SEP]), against the
   same windows' token ids sent as separate inputs (8 concurrent requests, one per document's windows). The
   ratio's target is >= 0.8.
2. Late chunking, the same way: each document as 40 chunks on /v1/contextualizedembeddings, against its slices
   (256 tokens every 256 - 256 // 4 of the whole encoding with specials, the last ending at its end) sent as
   separate token-id inputs; the server frames each slice with [CLS]/[SEP] and keeps 256 tokens, so both ways
   run the same number of 256-token rows.
   In 1 and 2 the two ways alternate over `--rounds` rounds (which goes first alternates too), after a warm-up;
   each round's usage.total_tokens is checked against the rows counted here. Medians are printed.
3. A one-sentence request's latency: p50 idle, and p50 while a 100,000-token document (`long_input: "mean"`,
   sent again and again) is in flight, sent one at a time in two ways: back to back (each just after a pass of
   the long document began, as the last one's answer came: the worst case) and at random moments (a pause of
   up to one pass first); a sample counts when the long document was in flight from its start to its end. And
   one pass's time (one request of 32 inputs of 256 tokens). The issue's bound: p50 busy <= 2 x p50 idle + one
   pass.
4. Time and peak resident memory (the server's whole process tree, gateway and model service, sampled every
   20 ms) for one 100,000-token document with `long_input: "mean"`, then as 400 chunks with `late_chunking`.

`--quick` shrinks every size (2 documents of 2,000 tokens, a 20,000-token long document, 2 rounds) for a dry run
of a minute or two. The machine's load average is printed with the figures: they mean little on a busy machine.
Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from load import WORDS, corpus, tree_rss_mb  # noqa: E402
from server import free_port, start_server, stop_server  # noqa: E402

from models.resolve import resolve_model  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDINGS = "/v1/embeddings"
CONTEXTUALIZED = "/v1/contextualizedembeddings"
PASS_ROWS = 32  # the CPU's batch_size (config/settings.py)
TIMEOUT = aiohttp.ClientTimeout(total=900)


@dataclass(frozen=True)
class Sizes:
    documents: int  # sections 1 and 2: documents, one request each, all in flight at once
    document_tokens: int  # content tokens per document, specials excluded
    chunks: int  # late chunking: chunks per document
    long_tokens: int  # sections 3 and 4: the long document
    long_chunks: int
    rounds: int
    idle_samples: int  # section 3: short requests, idle
    busy_samples: int  # section 3: short requests while the long document is in flight, each way (at least)
    long_repeats: int  # section 3: most times the long document is sent


FULL = Sizes(8, 8000, 40, 100_000, 400, 5, 100, 30, 6)
QUICK = Sizes(2, 2000, 10, 20_000, 80, 2, 30, 8, 3)


class Tokenizer:
    """The model's fast tokenizer, and its BERT frame: [CLS] content [SEP]."""

    def __init__(self, folder: Path) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.cls, self.sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        self.tokenizer.model_max_length = 10**9  # documents are long on purpose: no warning
        self.limit = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]

    def content(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encoding(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=True)["input_ids"]

    def document(self, tokens: int, seed: int) -> str:
        """Words of load.WORDS, `tokens` content tokens in all (WordPiece splits at spaces, so words add up)."""
        counts = {word: len(self.content(word)) for word in WORDS}
        single = [word for word, count in counts.items() if count == 1]
        rng = random.Random(seed)
        words: list[str] = []
        left = tokens
        while left:
            word = rng.choice(WORDS)
            if counts[word] > left:
                word = rng.choice(single)
            words.append(word)
            left -= counts[word]
        text = " ".join(words)
        assert len(self.content(text)) == tokens, "a word tokenized differently inside the document"
        return text

    def windows(self, text: str) -> list[list[int]]:
        """`long_input: mean`'s windows: the content cut every L - 2 tokens, the last reaching the end, framed."""
        content = self.content(text)
        width = self.limit - 2
        starts = [0]
        while starts[-1] + width < len(content):
            starts.append(starts[-1] + width)
        return [[self.cls, *content[start : start + width], self.sep] for start in starts]

    def slices(self, text: str) -> list[list[int]]:
        """Long late chunking's slices of the whole encoding: L tokens every L - L // 4, the last ending at the end."""
        ids = self.encoding(text)
        if len(ids) <= self.limit:
            return [ids]
        step = self.limit - self.limit // 4
        starts = list(range(0, len(ids) - self.limit, step)) + [len(ids) - self.limit]
        return [ids[start : start + self.limit] for start in starts]


def chunked(text: str, count: int) -> list[str]:
    """`text` as `count` chunks of whole words whose join with one space is `text` (what late chunking encodes)."""
    words = text.split(" ")
    bounds = [round(i * len(words) / count) for i in range(count + 1)]
    chunks = [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert " ".join(chunks) == text
    return chunks


def mean_body(text: str) -> dict:
    return {"model": MINILM, "input": [text], "long_input": "mean"}


def ids_body(rows: list[list[int]]) -> dict:
    return {"model": MINILM, "input": rows}


def contextualized_body(chunks: list[str]) -> dict:
    return {"model": MINILM, "inputs": [chunks]}


def late_body(chunks: list[str]) -> dict:
    return {"model": MINILM, "input": chunks, "late_chunking": True}


class Client:
    """Requests to the server, their bodies serialized before the clock starts. A request whose kept-alive
    connection the server dropped is sent again once, and counted (`dropped`)."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session
        self.dropped = 0

    async def post(self, path: str, body: bytes) -> dict:
        try:
            return await self._post(path, body)
        except aiohttp.ServerDisconnectedError:
            self.dropped += 1
            return await self._post(path, body)

    async def _post(self, path: str, body: bytes) -> dict:
        async with self.session.post(
            self.url + path, data=body, headers={"Content-Type": "application/json"}
        ) as response:
            answer = await response.read()
            assert response.status == 200, answer[:500]
            return json.loads(answer)

    async def together(self, path: str, bodies: list[bytes]) -> tuple[float, int]:
        """Seconds from sending the first to the last answer, all in flight at once; usage's tokens, summed."""
        started = time.perf_counter()
        answers = await asyncio.gather(*(self.post(path, body) for body in bodies))
        seconds = time.perf_counter() - started
        return seconds, sum(tokens(answer) for answer in answers)


def tokens(answer: dict) -> int:
    usage = answer["usage"]
    return usage["total_tokens"] if "total_tokens" in usage else usage["prompt_tokens"]


def encoded(body: dict) -> bytes:
    return json.dumps(body).encode()


@dataclass(frozen=True)
class Way:
    name: str
    path: str
    bodies: list[bytes]
    rows: int  # model rows (windows, slices) in all
    tokens: int  # the usage the server must report


async def compare(client: Client, title: str, ways: tuple[Way, Way], rounds: int) -> dict[str, float]:
    """The two ways in turn, `rounds` times after a warm-up, which goes first alternating; rows per second."""
    for way in ways:
        await client.together(way.path, way.bodies)
    rates: dict[str, list[float]] = {way.name: [] for way in ways}
    for round_ in range(rounds):
        for way in ways if round_ % 2 == 0 else ways[::-1]:
            seconds, used = await client.together(way.path, way.bodies)
            assert used == way.tokens, f"{way.name}: usage {used} tokens, {way.tokens} expected"
            rates[way.name].append(way.rows / seconds)
        done = ", ".join(f"{name} {values[-1]:.1f} rows/s" for name, values in rates.items())
        print(f"  round {round_ + 1}: {done}", flush=True)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    ratio = medians[ways[0].name] / medians[ways[1].name]
    ratios = [a / b for a, b in zip(rates[ways[0].name], rates[ways[1].name])]
    print(
        f"{title}: {ways[0].name} {medians[ways[0].name]:.1f} rows/s, {ways[1].name} {medians[ways[1].name]:.1f} "
        f"rows/s (medians); ratio {ratio:.2f} (per round {', '.join(f'{r:.2f}' for r in ratios)}); "
        f"target >= 0.8: {'met' if ratio >= 0.8 else 'NOT met'}",
        flush=True,
    )
    return {**medians, "ratio": ratio}


async def mean_vs_windows(client: Client, tok: Tokenizer, texts: list[str], rounds: int) -> dict[str, float]:
    windows = [tok.windows(text) for text in texts]
    rows = sum(len(w) for w in windows)
    used = sum(len(row) for w in windows for row in w)
    print(
        f"\n1. long_input mean: {len(texts)} documents of {len(tok.content(texts[0]))} tokens, {rows} windows",
        flush=True,
    )
    return await compare(
        client,
        "long_input mean vs its windows",
        (
            Way("mean", EMBEDDINGS, [encoded(mean_body(text)) for text in texts], rows, used),
            Way("windows as inputs", EMBEDDINGS, [encoded(ids_body(w)) for w in windows], rows, used),
        ),
        rounds,
    )


async def late_vs_slices(
    client: Client, tok: Tokenizer, texts: list[str], chunks: int, rounds: int
) -> dict[str, float]:
    slices = [tok.slices(text) for text in texts]
    rows = sum(len(s) for s in slices)
    used = rows * tok.limit
    print(
        f"\n2. late chunking: {len(texts)} documents of {len(tok.encoding(texts[0]))} tokens with specials, "
        f"{chunks} chunks each on {CONTEXTUALIZED}, {rows} slices",
        flush=True,
    )
    return await compare(
        client,
        "late chunking vs its slices",
        (
            Way(
                "late chunking",
                CONTEXTUALIZED,
                [encoded(contextualized_body(chunked(t, chunks))) for t in texts],
                rows,
                used,
            ),
            Way("slices as inputs", EMBEDDINGS, [encoded(ids_body(s)) for s in slices], rows, used),
        ),
        rounds,
    )


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def max_ms(values: list[float]) -> float:
    return max(values) * 1000 if values else float("nan")


class Section3:
    """Short requests, one at a time, against an idle server and while a long document is in flight."""

    def __init__(self, client: Client, tok: Tokenizer, long_text: str, sizes: Sizes) -> None:
        self.client, self.sizes = client, sizes
        self.shorts = [encoded({"model": MINILM, "input": [text]}) for text in corpus(500, 8, 20, seed=7)]
        self.sent = 0
        windows = tok.windows(tok.document(PASS_ROWS * (tok.limit - 2), seed=11))
        self.one_pass = encoded(ids_body(windows[:PASS_ROWS]))
        self.long_body = encoded(mean_body(long_text))
        self.long_seconds: list[float] = []

    async def latency(self, body: bytes) -> float:
        started = time.perf_counter()
        await self.client.post(EMBEDDINGS, body)
        return time.perf_counter() - started

    async def short(self) -> float:
        self.sent += 1
        return await self.latency(self.shorts[self.sent % len(self.shorts)])

    async def passes(self, count: int) -> list[float]:
        return [await self.latency(self.one_pass) for _ in range(count)]

    async def busy(self, gap: Callable[[], float]) -> list[float]:
        """Short requests' latencies while the long document is in flight (it is sent again as soon as it is
        answered, until there are enough), each sent `gap()` seconds after the last one's answer. A latency counts
        when the same long document was in flight from its request's start to its end."""
        finished, in_flight = 0, False
        latencies: list[float] = []

        async def long_loop() -> None:
            nonlocal finished, in_flight
            for _ in range(self.sizes.long_repeats):
                in_flight = True
                self.long_seconds.append(await self.latency(self.long_body))
                in_flight = False
                finished += 1
                if len(latencies) >= self.sizes.busy_samples:
                    return

        task = asyncio.create_task(long_loop())
        while not task.done():
            await asyncio.sleep(gap() if in_flight else 0.001)
            if not in_flight:
                continue
            before = finished
            seconds = await self.short()
            if in_flight and finished == before:
                latencies.append(seconds)
        await task
        return latencies


async def short_while_long(client: Client, tok: Tokenizer, long_text: str, sizes: Sizes) -> dict[str, float]:
    """Two ways of sending the short requests while the long document runs: back to back, each sent as the last
    is answered, which is just after one of the long document's passes began (the worst case: a whole pass to
    wait); and at random moments (a pause of up to one pass after each answer), so that arrivals spread over
    the passes."""
    section = Section3(client, tok, long_text, sizes)
    for _ in range(10):
        await section.short()
    idle = [await section.short() for _ in range(sizes.idle_samples)]
    await section.passes(1)
    passes = await section.passes(5)
    rng = random.Random(5)
    pass_s = statistics.median(passes)
    alone = await section.latency(section.long_body)
    windows = len(tok.windows(long_text))
    back_to_back = await section.busy(lambda: 0.0)
    spread = await section.busy(lambda: rng.uniform(0.0, pass_s))
    passes += await section.passes(5)
    figures = {
        "p50_idle_ms": median_ms(idle),
        "pass_ms": median_ms(passes),
        "p50_back_to_back_ms": median_ms(back_to_back),
        "max_back_to_back_ms": max_ms(back_to_back),
        "p50_random_ms": median_ms(spread),
        "max_random_ms": max_ms(spread),
        "long_s": statistics.median(section.long_seconds),
        "long_alone_s": alone,
        "long_per_pass_ms": alone / windows * PASS_ROWS * 1000,
    }
    bound = 2 * figures["p50_idle_ms"] + figures["pass_ms"]
    print(
        f"\n3. a short request (one sentence) during a {len(tok.content(long_text))}-token document "
        f"(long_input mean, {figures['long_s']:.1f} s each while busy, median of {len(section.long_seconds)})"
    )
    print(
        f"one pass ({PASS_ROWS} x {tok.limit} tokens, one request) {figures['pass_ms']:.0f} ms (median of "
        f"{len(passes)}); short p50 idle {figures['p50_idle_ms']:.1f} ms ({len(idle)} requests); the long document "
        f"alone {alone:.1f} s ({windows} windows: {figures['long_per_pass_ms']:.0f} ms per {PASS_ROWS})"
    )
    for name, values in (("back to back", back_to_back), ("at random moments", spread)):
        p50 = median_ms(values)
        print(
            f"busy, {name:18s} p50 {p50:6.0f} ms, max {max_ms(values):6.0f} ms ({len(values)} requests); "
            f"p50 <= 2 x p50 idle + one pass ({bound:.0f} ms): {'met' if p50 <= bound else 'NOT met'}",
            flush=True,
        )
    return figures


class PeakRss:
    """The server's process-tree RSS sampled every 20 ms from a thread, while the block runs; MiB."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_mb(self.pid))
            self._stop.wait(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def one_long(client: Client, pid: int, path: str, body: bytes) -> tuple[float, float, float]:
    """(seconds, RSS before, peak RSS while it ran) for one request."""
    before = tree_rss_mb(pid)
    with PeakRss(pid) as rss:
        started = time.perf_counter()
        await client.post(path, body)
        seconds = time.perf_counter() - started
    return seconds, before, rss.peak


async def long_document(client: Client, pid: int, tok: Tokenizer, text: str, chunks: int) -> dict[str, Any]:
    n = len(tok.content(text))
    print(f"\n4. one {n}-token document: time and the server's RSS (process tree, MiB)")
    figures = {}
    for name, path, body in (
        ("long_input mean", EMBEDDINGS, encoded(mean_body(text))),
        (f"late_chunking, {chunks} chunks", EMBEDDINGS, encoded(late_body(chunked(text, chunks)))),
    ):
        seconds, before, peak = await one_long(client, pid, path, body)
        figures[name] = {"seconds": seconds, "rss_before_mb": before, "rss_peak_mb": peak}
        print(
            f"{name:28s} {seconds:6.1f} s  RSS before {before:6.0f}  peak {peak:6.0f}  (+{peak - before:.0f})",
            flush=True,
        )
    return figures


async def measure(url: str, pid: int, tok: Tokenizer, sizes: Sizes) -> dict[str, Any]:
    texts = [tok.document(sizes.document_tokens, seed=i) for i in range(sizes.documents)]
    long_text = tok.document(sizes.long_tokens, seed=100)
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session:
        client = Client(url, session)
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("mean", lambda: mean_vs_windows(client, tok, texts, sizes.rounds)),
            ("late", lambda: late_vs_slices(client, tok, texts, sizes.chunks, sizes.rounds)),
            ("short", lambda: short_while_long(client, tok, long_text, sizes)),
            ("long", lambda: long_document(client, pid, tok, long_text, sizes.long_chunks)),
        ]
        figures = {name: await step() for name, step in steps}
        if client.dropped:
            print(f"\nthe server dropped {client.dropped} connection(s); those requests were sent again")
        return figures


def tree_pids(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a dry run")
    parser.add_argument("--rounds", type=int, help="rounds of sections 1 and 2 (default 5, quick 2)")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.rounds:
        sizes = replace(sizes, rounds=args.rounds)
    tok = Tokenizer(resolve_model(MINILM))
    port = free_port()
    started = time.perf_counter()
    process = start_server(port, EMBENTO_MODEL_ID=MINILM)
    print(
        f"{MINILM} (L = {tok.limit}) ready in {time.perf_counter() - started:.0f} s; load average "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    processes = tree_pids(process.pid)
    try:
        figures = asyncio.run(measure(f"http://127.0.0.1:{port}", process.pid, tok, sizes))
    finally:
        if gone := processes - tree_pids(process.pid):
            print(f"server processes {sorted(gone)} ended during the run (a worker restarted?)", flush=True)
        stop_server(process)
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(json.dumps(figures, indent=None, default=float))


if __name__ == "__main__":
    main()
