"""Soak: minutes of mixed load (text embeddings, rerank, image embeddings) on one server, watching errors and
memory. Figures: docs/architecture.md's "Soak".

    python bench/soak.py [--minutes 10] [--text 6] [--rerank 3] [--image 2] [--cpu-threads N]

The packaged all-MiniLM-L6-v2, a reranker of ms-marco-MiniLM-L-6-v2's shape (bench/rerank.py) and a tiny CLIP;
each client sends, checks the answer, sends again. RSS is sampled every SAMPLE_EVERY_S; growth is read from
SETTLE_S on (allocator caches and batch shapes settled) to the end. Printed: requests and errors per kind, the RSS
series, and whether a fixed request's answer changed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import numpy as np
import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from load import corpus, tree_rss_mb
from rerank import QUERY, build_reranker
from server import free_port, start_server, stop_server

from models.resolve import packaged_model_path
from testkit.checkpoints import build_clip
from testkit.media import image_bytes

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SETTLE_S = 60.0
SAMPLE_EVERY_S = 15.0
PROBE = {"model": MINILM, "input": ["the same sentence, every time"]}


SERVICES = ("Embento", "TextEmbedder", "Reranker", "ClipEmbedder")


def rss_by_process(pid: int) -> dict[str, float]:
    """MiB per process of the server's tree, named by the service it runs (the process manager otherwise)."""
    root = psutil.Process(pid)
    sizes: dict[str, float] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            name = next((n for n in SERVICES if n in process.cmdline()), f"pid {process.pid}")
            sizes[name] = sizes.get(name, 0.0) + process.memory_info().rss / 2**20
        except psutil.NoSuchProcess:
            continue
    return sizes


def bodies(kind: str, rng: random.Random) -> dict:
    if kind == "text":
        return {"model": MINILM, "input": corpus(rng.randint(1, 16), 3, 120, seed=rng.randrange(10**6))}
    if kind == "rerank":
        return {
            "model": "reranker",
            "query": QUERY,
            "documents": corpus(rng.randint(2, 20), 10, 80, seed=rng.randrange(10**6)),
        }
    images = [
        image_bytes(rng.randint(24, 96), rng.randint(24, 96), seed=rng.randrange(10**6))
        for _ in range(rng.randint(1, 4))
    ]
    uris = ["data:image/png;base64," + base64.b64encode(image).decode() for image in images]
    return {"model": "clip", "input": [{"image": uri} for uri in uris]}


PATHS = {"text": "/v1/embeddings", "rerank": "/v1/rerank", "image": "/v1/embeddings"}


def answer_is_complete(kind: str, body: dict, answer: dict) -> bool:
    if kind == "rerank":
        return len(answer["results"]) == len(body["documents"])
    return len(answer["data"]) == len(body["input"])


async def client(url: str, kind: str, seed: int, stop_at: float, counts: Counter) -> None:
    rng = random.Random(seed)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        while time.monotonic() < stop_at:
            body = bodies(kind, rng)
            try:
                async with http.post(url + PATHS[kind], json=body) as response:
                    answer = await response.json()
                    ok = response.status == 200 and answer_is_complete(kind, body, answer)
                    counts[(kind, "ok" if ok else f"status {response.status}")] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                counts[(kind, type(exc).__name__)] += 1


async def probe(url: str) -> np.ndarray:
    async with aiohttp.ClientSession() as http, http.post(url + "/v1/embeddings", json=PROBE) as response:
        return np.array((await response.json())["data"][0]["embedding"])


async def soak(url: str, pid: int, minutes: float, clients: dict[str, int]) -> None:
    before = await probe(url)
    started = time.monotonic()
    stop_at = started + minutes * 60
    counts: Counter = Counter()
    tasks = [
        asyncio.create_task(client(url, kind, seed=i * 100 + n, stop_at=stop_at, counts=counts))
        for i, (kind, n_clients) in enumerate(clients.items())
        for n in range(n_clients)
    ]
    samples: list[tuple[float, float]] = []
    processes: list[tuple[float, dict[str, float]]] = []
    while time.monotonic() < stop_at:
        samples.append((time.monotonic() - started, tree_rss_mb(pid)))
        processes.append((samples[-1][0], rss_by_process(pid)))
        await asyncio.sleep(SAMPLE_EVERY_S)
    await asyncio.gather(*tasks)
    samples.append((time.monotonic() - started, tree_rss_mb(pid)))
    processes.append((samples[-1][0], rss_by_process(pid)))
    after = await probe(url)

    print(f"{minutes:g} min, clients {clients}")
    for kind in clients:
        by_outcome = {outcome: n for (k, outcome), n in counts.items() if k == kind}
        total = sum(by_outcome.values())
        print(f"  {kind:7s} {total:7d} requests ({total / (minutes * 60):6.1f}/s)  {by_outcome}")
    errors = sum(n for (_, outcome), n in counts.items() if outcome != "ok")
    print(f"  errors: {errors}")
    print("  RSS (MiB) by time: " + ", ".join(f"{t:.0f}s {rss:.0f}" for t, rss in samples))
    settled = next(rss for t, rss in samples if t >= SETTLE_S)
    print(
        f"  RSS after {SETTLE_S:.0f} s: {settled:.0f} MiB; at the end: {samples[-1][1]:.0f} MiB; "
        f"growth {100 * (samples[-1][1] - settled) / settled:+.1f} %; peak {max(r for _, r in samples):.0f} MiB"
    )
    settled_processes = next(sizes for t, sizes in processes if t >= SETTLE_S)
    for name, end in processes[-1][1].items():
        start = settled_processes.get(name, float("nan"))
        print(f"    {name:14s} {start:7.0f} MiB after {SETTLE_S:.0f} s, {end:7.0f} MiB at the end ({end - start:+.0f})")
    print(f"  fixed request's embedding unchanged: {bool(np.allclose(before, after, atol=1e-6))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--text", type=int, default=6)
    parser.add_argument("--rerank", type=int, default=3)
    parser.add_argument("--image", type=int, default=2)
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        help="threads per model service (default: the cores shared among the three)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        reranker = build_reranker(folder / "reranker")
        clip = build_clip(folder / "clip", packaged_model_path(MINILM))
        config = {
            "models": [
                {"model_id": MINILM},
                {"model_id": str(reranker), "served_model_name": "reranker"},
                {"model_id": str(clip), "served_model_name": "clip"},
            ],
            "cache_dir": str(folder / "cache"),
            "cpu_threads": args.cpu_threads,
        }
        (folder / "embento.yaml").write_text(yaml.safe_dump(config))
        port = free_port()
        process = start_server(port, EMBENTO_CONFIG=str(folder / "embento.yaml"), BENTOML_HOME=str(folder / "home"))
        try:
            clients = {"text": args.text, "rerank": args.rerank, "image": args.image}
            asyncio.run(soak(f"http://127.0.0.1:{port}", process.pid, args.minutes, clients))
        finally:
            stop_server(process)


if __name__ == "__main__":
    main()
