"""How busy does Embento keep a GPU? A simulated device served through the real gateway and model service; the
method and figures are docs/architecture.md's "The simulated GPU".

    python bench/simulated_device.py [--seconds 8] [--speeds large,small] [--workers 1,2]

`SimulatedEncoder` replaces the text embedder's model: its host side collates the rows and holds the GIL for
`launch_ms` (Python launching kernels); its device, one thread, sleeps `fixed_ms` plus `per_token_us` per padded
token with the GIL released, pass after pass, as a CUDA stream runs them. The model service writes the device's
busy seconds to a file; reported: sent/s, busy / wall time, rows per pass and the gateway's CPU per request.
SPEEDS are set against this host: "large" (bge-large-like) keeps the device the bound, "small" (MiniLM-like)
leaves the gateway's CPU the bound. For "before" figures, run it in an earlier checkout (copy bench/simulated_*.py
there).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config.settings import ModelConfig  # noqa: E402
from models.base import ModelInfo  # noqa: E402

SPEEDS = {  # launch ms (host, GIL held), fixed ms per pass (device), us per padded token (device)
    "large": (3.0, 2.0, 25.0),
    "small": (1.0, 0.3, 2.5),
}


def device_env(speed: str, stats: Path) -> dict[str, str]:
    """The model service's settings for a simulated device of `speed`, writing its busy time to `stats`."""
    return {"SIM_DEVICE": ",".join(map(str, SPEEDS[speed])), "SIM_STATS": str(stats)}


STATS = struct.Struct("dqqq")  # device-busy seconds, passes, rows, padded tokens
DIMENSION = 384
SIMULATED_MEMORY_BYTES = 80 * 2**30  # free after loading, as on an H100
MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # its tokenizer, in the gateway, is the real one
SCENARIOS = ((64, 1), (64, 32), (256, 1), (256, 32))  # clients x sentences per request


class _Pending:
    def __init__(self, done: Future) -> None:
        self._done = done

    def wait(self) -> np.ndarray:
        return self._done.result()


class SimulatedEncoder:
    """A `TokenModel` whose forward pass is a device that takes time but no host CPU."""

    def __init__(self, folder: Path, cfg: ModelConfig) -> None:
        launch_ms, fixed_ms, per_token_us = (float(v) for v in os.environ["SIM_DEVICE"].split(","))
        self.launch_s, self.fixed_s, self.per_token_s = launch_ms / 1000, fixed_ms / 1000, per_token_us / 1e6
        self._device = ThreadPoolExecutor(max_workers=1, thread_name_prefix="simulated-device")
        self._stats = os.open(os.environ["SIM_STATS"], os.O_RDWR | os.O_CREAT, 0o600)
        self._busy, self._passes, self._rows, self._tokens = 0.0, 0, 0, 0
        self.info = ModelInfo(
            served_model_name=cfg.served_model_name,
            model_id=cfg.model_id,
            kind="embed",
            modalities=["text"],
            backend="torch",
            dimension=DIMENSION,
            max_input_tokens=256,
            normalized=True,
            device="cuda:0",
            dtype="bfloat16",
        )

    def launch(self, rows: list[Any]) -> _Pending:
        width = max(row.length for row in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)  # the host's collate, as models/inference/padding.py does
        for index, row in enumerate(rows):
            ids[index, : row.length] = row.input_ids
        until = time.perf_counter() + self.launch_s
        while time.perf_counter() < until:  # Python launching kernels: the GIL is held
            pass
        return _Pending(self._device.submit(self._run, len(rows), ids.size))

    def forward(self, rows: list[Any]) -> np.ndarray:
        return self.launch(rows).wait()

    def _run(self, count: int, tokens: int) -> np.ndarray:
        seconds = self.fixed_s + self.per_token_s * tokens
        time.sleep(seconds)
        self._busy += seconds
        self._passes, self._rows, self._tokens = self._passes + 1, self._rows + count, self._tokens + tokens
        os.pwrite(self._stats, STATS.pack(self._busy, self._passes, self._rows, self._tokens), 0)
        vectors = np.zeros((count, DIMENSION), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors


def read_stats(path: Path) -> tuple[float, int, int, int]:
    data = path.read_bytes() if path.exists() else b""
    return STATS.unpack(data[: STATS.size]) if len(data) >= STATS.size else (0.0, 0, 0, 0)


def gateway_cpu_seconds(server_pid: int) -> float:
    """CPU time of the gateway worker processes so far."""
    import psutil

    total = 0.0
    for process in psutil.Process(server_pid).children(recursive=True):
        if "--service-name Embento" in " ".join(process.cmdline()):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def measure(
    url: str, pid: int, stats: Path, clients: int, per_request: int, seconds: float, corpus: list[str]
) -> dict[str, float]:
    from bench.server import closed_loop

    def request_for(batch: list[str]) -> tuple[str, dict]:
        return "/v1/embeddings", {"model": MODEL, "input": batch}

    asyncio.run(closed_loop(url, request_for, corpus, 2.0, clients, per_request))  # warm: passes settle
    busy0, passes0, rows0, _ = read_stats(stats)
    cpu0, started = gateway_cpu_seconds(pid), time.perf_counter()
    rate, _ = asyncio.run(closed_loop(url, request_for, corpus, seconds, clients, per_request))
    wall = time.perf_counter() - started
    busy1, passes1, rows1, _ = read_stats(stats)
    cpu = gateway_cpu_seconds(pid) - cpu0
    return {
        "sent_s": rate,
        "busy": (busy1 - busy0) / wall,
        "rows_per_pass": (rows1 - rows0) / max(1, passes1 - passes0),
        "gateway_cpu_ms_per_request": 1000 * cpu / max(1, rate * wall / per_request),
        "sent_s_per_gateway_core": rate / max(1e-9, cpu / wall),
    }


def main() -> None:
    from bench.server import free_port, start_server, stop_server
    from testkit.sentences import make_sentences

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--speeds", default="large,small")
    parser.add_argument("--workers", default="1", help="gateway workers to try, e.g. 1,2")
    args = parser.parse_args()
    corpus = make_sentences(4096, seed=3)
    print(
        "speed | gateway workers | clients x sentences | sent/s | device busy | rows/pass | "
        "gateway CPU ms/request | sent/s per gateway core"
    )
    for speed in args.speeds.split(","):
        for workers in [int(w) for w in args.workers.split(",")]:
            stats = Path(f"/tmp/embento-sim-{os.getpid()}-{speed}-{workers}")
            stats.unlink(missing_ok=True)
            port = free_port()
            settings = device_env(speed, stats) | {
                "EMBENTO_MODEL_ID": MODEL,
                "EMBENTO_DEVICE": "cuda",
                "EMBENTO_GATEWAY_WORKERS": str(workers),
                "EMBENTO_MAX_CONCURRENT_REQUESTS": "4096",
            }
            server = start_server(port, target="bench.simulated_service:Gateway", **settings)
            try:
                for clients, per_request in SCENARIOS:
                    r = measure(
                        f"http://127.0.0.1:{port}", server.pid, stats, clients, per_request, args.seconds, corpus
                    )
                    print(
                        f"{speed} | {workers} | {clients} x {per_request} | {r['sent_s']:.0f} | "
                        f"{100 * r['busy']:.0f} % | {r['rows_per_pass']:.0f} | {r['gateway_cpu_ms_per_request']:.2f}"
                        f" | {r['sent_s_per_gateway_core']:.0f}",
                        flush=True,
                    )
            finally:
                stop_server(server)
                stats.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
