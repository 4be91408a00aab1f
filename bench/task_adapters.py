"""What choosing the task adapter per request costs: all-MiniLM-L6-v2 with jina-embeddings-v5-text's four task
adapters (drawn by testkit/adapters.py) under a single-task and a mixed-task load, and the checkpoint without
adapters beside them, in alternating rounds of one run. Figures: docs/models.md ("What a mixed load costs").

    python bench/task_adapters.py [--seconds 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.server import closed_loop, free_port, start_server, stop_server  # noqa: E402
from models.resolve import packaged_model_path  # noqa: E402
from testkit.adapters import with_task_adapters  # noqa: E402
from testkit.sentences import make_sentences  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
ADAPTED = "minilm-tasks"
TASKS = ("retrieval", "text-matching", "clustering", "classification")
IN_FLIGHT = 8
PER_REQUEST = 10
# Each load: the model, and the task of each next request (None: no task field).
LOADS: dict[str, tuple[str, tuple[str | None, ...]]] = {
    "no adapters": (MINILM, (None,)),
    "single task": (ADAPTED, (TASKS[0],)),
    "mixed tasks (4)": (ADAPTED, TASKS),
}


def requests(model: str, tasks: tuple[str | None, ...]) -> Callable[[list[str]], tuple[str, dict]]:
    """Each next request's body, its task the next of `tasks`."""
    cycle = itertools.cycle(tasks)

    def request(batch: list[str]) -> tuple[str, dict]:
        task = next(cycle)
        return "/v1/embeddings", {"model": model, "input": batch, **({"task": task} if task else {})}

    return request


def measure(url: str, load: str, corpus: list[str], seconds: float) -> float:
    model, tasks = LOADS[load]
    rate, _ = asyncio.run(closed_loop(url, requests(model, tasks), corpus, seconds, IN_FLIGHT, PER_REQUEST))
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    corpus = make_sentences(200, seed=3)[:190]
    with tempfile.TemporaryDirectory() as scratch:
        adapted = with_task_adapters(Path(str(packaged_model_path(MINILM))), Path(scratch) / "minilm-tasks", TASKS)
        port = free_port()
        server = start_server(
            port,
            EMBENTO_MODEL_ID=f"{adapted};{MINILM}",
            EMBENTO_SERVED_MODEL_NAME=f"{ADAPTED};{MINILM}",
            EMBENTO_BACKEND="torch",
        )
        try:
            url = f"http://127.0.0.1:{port}"
            for load in LOADS:
                measure(url, load, corpus, 2.0)  # warm
            rates: dict[str, list[float]] = {load: [] for load in LOADS}
            for round_index in range(args.rounds):  # each round in another order: drift hits every load
                order = list(LOADS)[round_index % len(LOADS) :] + list(LOADS)[: round_index % len(LOADS)]
                for load in order:
                    rates[load].append(measure(url, load, corpus, args.seconds))
        finally:
            stop_server(server)
    single = statistics.median(rates["single task"])
    for load in LOADS:
        rate = statistics.median(rates[load])
        spread = f"{min(rates[load]):.1f}-{max(rates[load]):.1f}"
        print(f"{load:18s} {rate:8.1f} sent/s (median of {args.rounds}, {spread})  x{rate / single:.2f} of single task")


if __name__ == "__main__":
    main()
