"""Rerank throughput: `bentoml serve` against sentence-transformers' CrossEncoder in-process, same pairs.

    python bench/rerank.py [--duration 20]

The model has the shape of cross-encoder/ms-marco-MiniLM-L-6-v2 (the common small reranker): the packaged
all-MiniLM-L6-v2 encoder under a fresh one-logit head, built here because the Hub is out of reach. Scores
are meaningless; the compute is a real reranker's. Loopback only, bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load  # noqa: E402
from ceiling import measure  # noqa: E402
from load import Scenario, corpus  # noqa: E402
from server import free_port, start_server, stop_server  # noqa: E402

NAME = "minilm-l6-reranker"
QUERY = "how do platform teams keep embedding data private and costs fixed"
SCENARIOS = (
    Scenario("32 in flight x 20 documents", 32, 20, 20, 80),
    Scenario("sequential x 20 documents", 1, 20, 20, 80),
)


def build_reranker(folder: Path) -> Path:
    import shutil

    from transformers import BertForSequenceClassification

    from models.resolve import packaged_model_path

    minilm = packaged_model_path("sentence-transformers/all-MiniLM-L6-v2")
    BertForSequenceClassification.from_pretrained(str(minilm), num_labels=1).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm / name, folder / name)
    return folder


def ceiling(folder: Path, seconds: float) -> dict[str, float]:
    """CrossEncoder.predict with its defaults (length-sorted, 32 pairs per pass) on what a perfect batcher
    would gather: every in-flight request's pairs at once."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(folder), device="cpu", local_files_only=True)
    model.predict([(QUERY, d) for d in corpus(64, 20, 80)])  # warm-up
    figures = {}
    for scenario in SCENARIOS:
        figures[scenario.name] = measure(lambda documents: model.predict([(QUERY, d) for d in documents]),
                                         scenario, seconds)
        print(f"ceiling {scenario.name:40s} {figures[scenario.name]:9.1f} pairs/s")
    return figures


def rerank_body(documents: list[str]) -> dict:
    return {"model": NAME, "query": QUERY, "documents": documents}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per scenario")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_reranker(Path(tmp))
        port = free_port()
        server = start_server(port, EMBENTO_MODEL_ID=str(folder), EMBENTO_SERVED_MODEL_NAME=NAME)
        try:
            ceilings = ceiling(folder, args.duration / 2)
            figures = asyncio.run(load.run_all(f"http://127.0.0.1:{port}/v1/rerank", rerank_body, server.pid,
                                               args.duration, 20000, SCENARIOS, unit="pairs"))
        finally:
            stop_server(server)
    print("\nscenario                                  server/ceiling")
    for name, figure in figures.items():
        print(f"{name:40s}  {figure['sentences_per_s'] / ceilings[name]:14.0%}")


if __name__ == "__main__":
    main()
