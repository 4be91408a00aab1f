"""Start `bentoml serve` with the default model, measure the in-process ceiling, then the server.

    python bench/run_all.py [--duration 20]

Prints each scenario's figures and the server/ceiling ratio. Loopback only, bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ceiling  # noqa: E402
import load  # noqa: E402
from server import free_port, start_server, stop_server  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TARGETS = {"32 in flight x 1 sentence": 0.60, "8 in flight x 10 sentences": 0.75}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per scenario")
    args = parser.parse_args()
    import torch

    from models.resolve import packaged_model_path

    port = free_port()
    server = start_server(port)
    try:
        threads = torch.get_num_threads()
        print(f"torch threads: {threads}; cores: {os.cpu_count()}")
        ceilings = ceiling.run(str(packaged_model_path(MODEL)), threads, args.duration / 2)
        figures = asyncio.run(load.run_all(f"http://127.0.0.1:{port}/v1/embeddings", load.embeddings_body(MODEL),
                                           server.pid, args.duration, 20000))
    finally:
        stop_server(server)
    print("\nscenario                                  server/ceiling  target")
    for name, figure in figures.items():
        ratio = figure["sentences_per_s"] / ceilings[name]
        target = f">= {TARGETS[name]:.0%}" if name in TARGETS else ""
        print(f"{name:40s}  {ratio:14.0%}  {target}")
    sequential = figures["sequential x 1 sentence"]["p50_ms"]
    print(f"sequential p50: {sequential:.1f} ms (target <= 20 ms)")


if __name__ == "__main__":
    main()
