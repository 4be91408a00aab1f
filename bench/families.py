"""Does the decoder path (left padding, last-token pooling, a chat template per pair) cost more than the BERT
path? Server throughput at 8 requests in flight over the in-process sentence-transformers call on the same
corpus, in the same run, for a tiny Qwen3 embedder and reranker and BERT models of the same size.

    python bench/families.py [--seconds 10]

The checkpoints are the test suite's (random weights, 2 layers of width 32): the model's compute is small,
so the ratio measures what the server adds around it, the part the template path could make worse.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.server import closed_loop, free_port, start_server, stop_server  # noqa: E402
from tests.checkpoints import (  # noqa: E402
    build_qwen3_embedder,
    build_qwen3_reranker,
    build_sequence_classifier,
    build_tiny_bert,
)
from tests.sentences import make_sentences  # noqa: E402

IN_FLIGHT = 8
PER_REQUEST = 10
QUERY = "how do engineers keep their data private"


def in_process(kind: str, folder: Path, corpus: list[str]) -> float:
    """Inputs per second of sentence-transformers' own call over the whole corpus (best of three)."""
    from sentence_transformers import CrossEncoder, SentenceTransformer

    if kind == "embed":
        model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        call: Callable[[], object] = lambda: model.encode(corpus, batch_size=32)  # noqa: E731
    else:
        cross = CrossEncoder(str(folder), device="cpu", local_files_only=True)
        call = lambda: cross.predict([(QUERY, d) for d in corpus], batch_size=32)  # noqa: E731
    call()
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return len(corpus) / best


async def through_server(url: str, kind: str, name: str, corpus: list[str], seconds: float) -> float:
    """Inputs per second with IN_FLIGHT closed-loop clients, each sending PER_REQUEST inputs a request."""

    def request_for(batch: list[str]) -> tuple[str, dict]:
        if kind == "embed":
            return "/v1/embeddings", {"model": name, "input": batch}
        return "/v1/rerank", {"model": name, "query": QUERY, "documents": batch}

    return (await closed_loop(url, request_for, corpus, seconds, IN_FLIGHT, PER_REQUEST))[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    from models.resolve import packaged_model_path

    minilm = packaged_model_path("sentence-transformers/all-MiniLM-L6-v2")
    root = Path(tempfile.mkdtemp(prefix="embento-bench-families-"))
    models = {
        "qwen3-embedder": ("embed", build_qwen3_embedder(root / "qe")),
        "bert-embedder": ("embed", build_tiny_bert(root / "be", minilm)),
        "qwen3-reranker": ("rerank", build_qwen3_reranker(root / "qr")),
        "bert-reranker": ("rerank", build_sequence_classifier(root / "br", minilm, ["relevance"])),
    }
    config = {
        "models": [
            {"model_id": str(folder), "served_model_name": name, "max_seq_length": 160}
            for name, (_, folder) in models.items()
        ],
        "cache_dir": str(root / "cache"),
    }
    (root / "embento.yaml").write_text(yaml.safe_dump(config))
    corpus = make_sentences(200, seed=3)[:190]  # 1 to 60 words, as a retrieval corpus is
    ceilings = {name: in_process(kind, folder, corpus) for name, (kind, folder) in models.items()}
    port = free_port()
    server = start_server(port, EMBENTO_CONFIG=str(root / "embento.yaml"))
    try:
        url = f"http://127.0.0.1:{port}"
        for name, (kind, _) in models.items():
            asyncio.run(through_server(url, kind, name, corpus, 2.0))  # warm
            served = asyncio.run(through_server(url, kind, name, corpus, args.seconds))
            print(
                f"{name:16s} server {served:8.1f} inputs/s   in-process {ceilings[name]:8.1f} inputs/s   "
                f"ratio {served / ceilings[name]:.2f}"
            )
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
