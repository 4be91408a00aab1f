"""Embento against infinity on the same model, the same load and the same cores, runs alternated.

infinity (`infinity-emb` on PyPI) is the closest peer and takes the same OpenAI-style requests, so one load
generator drives both. Install it apart from the project, whose pins it does not share, then point here:

    python -m venv /tmp/infinity && /tmp/infinity/bin/pip install "infinity-emb[server,torch]==0.0.78" torch==2.13.0
    python bench/peers.py --infinity /tmp/infinity/bin/infinity_emb

Both serve all-MiniLM-L6-v2 from the packaged folder on CPU with torch, each with its defaults otherwise
(batch size 32, every core). Each round starts one server, runs every scenario, stops it, then the other;
the medians over rounds and the ratio Embento / infinity are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import load
from server import free_port, start_server, stop_server, wait_until_ready

from models.resolve import packaged_model_path

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def start_infinity(executable: str, port: int) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    process = subprocess.Popen(
        [executable, "v2", "--model-id", str(packaged_model_path(MODEL)), "--served-model-name", MODEL,
         "--engine", "torch", "--device", "cpu", "--no-bettertransformer", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return wait_until_ready(process, f"http://127.0.0.1:{port}/health")


def measure(url: str, pid: int, duration: float) -> dict[str, load.Result]:
    body = load.embeddings_body(MODEL)
    asyncio.run(load.warm_up(url, body))
    results = {}
    for scenario in load.SCENARIOS:
        asyncio.run(load.run_scenario(url, body, scenario, 2, 100_000))  # this scenario's shapes, warm
        results[scenario.name] = asyncio.run(load.run_scenario(url, body, scenario, duration, 100_000))
        load.report(scenario, results[scenario.name], load.tree_rss_mb(pid))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--infinity", required=True, help="the infinity_emb executable")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per scenario and server")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, load.Result]]] = {"embento": [], "infinity": []}
    for round_ in range(args.rounds):
        for name in ("embento", "infinity") if round_ % 2 == 0 else ("infinity", "embento"):
            port = free_port()
            print(f"[round {round_ + 1}/{args.rounds}] {name}", flush=True)
            if name == "embento":
                server, url = start_server(port), f"http://127.0.0.1:{port}/v1/embeddings"
            else:
                server, url = start_infinity(args.infinity, port), f"http://127.0.0.1:{port}/embeddings"
            try:
                runs[name].append(measure(url, server.pid, args.duration))
            finally:
                stop_server(server)
    print(f"\nmedians of {args.rounds} rounds (sent/s, p50 ms):")
    for scenario in load.SCENARIOS:
        rate = {n: statistics.median(r[scenario.name].sentences / r[scenario.name].elapsed_s for r in rs)
                for n, rs in runs.items()}
        p50 = {n: statistics.median(r[scenario.name].percentile(0.5) for r in rs) for n, rs in runs.items()}
        errors = {n: sum(r[scenario.name].errors for r in rs) for n, rs in runs.items()}
        print(f"{scenario.name:40s} embento {rate['embento']:6.1f} (p50 {p50['embento']:6.1f})  infinity "
              f"{rate['infinity']:6.1f} (p50 {p50['infinity']:6.1f})  ratio {rate['embento'] / rate['infinity']:.2f}"
              f"  errors {errors['embento']}/{errors['infinity']}")


if __name__ == "__main__":
    main()
