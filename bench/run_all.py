"""Start `bentoml serve` with the default model, measure the in-process ceiling, then the server.

    python bench/run_all.py [--duration 20] [--backend onnx --dtype int8] [--scenario "8 in flight x 10 sentences"]

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
    parser.add_argument("--backend", choices=["torch", "onnx", "ctranslate2"], default=None,
                        help="serve on this backend; the ceiling is then the same engine in-process")
    parser.add_argument("--dtype", default="auto", help="with --backend: auto, float32, int8, ...")
    parser.add_argument("--scenario", action="append", help="run only these scenarios (repeatable)")
    args = parser.parse_args()
    scenarios = tuple(s for s in load.SCENARIOS if not args.scenario or s.name in args.scenario)
    import torch

    from models.resolve import packaged_model_path

    port = free_port()
    settings = {"EMBENTO_BACKEND": args.backend, "EMBENTO_DTYPE": args.dtype} if args.backend else {}
    server = start_server(port, **settings)
    try:
        threads = torch.get_num_threads()
        print(f"torch threads: {threads}; cores: {os.cpu_count()}")
        path = str(packaged_model_path(MODEL))
        ceilings = (ceiling.run_backend(path, args.backend, args.dtype, threads, args.duration / 2, scenarios)
                    if args.backend else ceiling.run(path, threads, args.duration / 2, scenarios))
        figures = asyncio.run(load.run_all(f"http://127.0.0.1:{port}/v1/embeddings", load.embeddings_body(MODEL),
                                           server.pid, args.duration, 20000, scenarios))
    finally:
        stop_server(server)
    print("\nscenario                                  server/ceiling  target")
    for name, figure in figures.items():
        ratio = figure["sentences_per_s"] / ceilings[name]
        target = f">= {TARGETS[name]:.0%}" if name in TARGETS else ""
        print(f"{name:40s}  {ratio:14.0%}  {target}")
    if "sequential x 1 sentence" in figures:
        print(f"sequential p50: {figures['sequential x 1 sentence']['p50_ms']:.1f} ms (target <= 20 ms)")


if __name__ == "__main__":
    main()
