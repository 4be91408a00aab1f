"""Memory that comes back: a model service's RSS before a load, loaded and run, and after the unload
(`ModelPool.load` and `unload`, runners/pool.py), for all-MiniLM-L6-v2 and the BERT-base shape
(bench/base_checkpoint.py); on CUDA, torch's allocated and reserved memory too. Figures: docs/architecture.md.

    python bench/model_memory.py [--backend torch] [--device cpu] [--cycles 3] [--server]

One process per model, as a model service is. Cycle 0 loads and drops the model once first: it imports the
backend's libraries, which stay whatever is loaded later. "kept" (after minus before) should not grow from cycle
to cycle. `--server`: the same cycles through a server's admin API (both models `load: lazy`), the TextEmbedder
process's RSS read at each step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MIB = 2**20
SENTENCES = 64


def measure(model: str, backend: str, device: str, cycles: int) -> list[dict]:
    """In this process: `cycles` + 1 load, run and unload cycles of `model`, with the figures of each."""
    import asyncio

    import psutil

    from bench.load import corpus
    from config.settings import ModelConfig
    from models.base import TokenizedText
    from models.inference.auto_backend import load_model
    from models.preprocessing.text_tokenizer import TextTokenizer
    from runners.pool import ModelPool

    cfg = ModelConfig(model_id=model, served_model_name="m", device=device, backend=backend, batch_size=32)
    rows = TokenizedText.rows("m", TextTokenizer(Path(model), cfg).encode_texts(corpus(SENTENCES, 8, 40)))
    pool = ModelPool(load_model, [])
    process = psutil.Process()

    def figures() -> dict:
        found = {"rss_mib": process.memory_info().rss / MIB}
        if device.startswith("cuda"):
            import torch

            found["allocated_mib"] = torch.cuda.memory_allocated() / MIB
            found["reserved_mib"] = torch.cuda.memory_reserved() / MIB
        return found

    results = []
    for cycle in range(cycles + 1):
        before = figures()
        pool.load(cfg)
        asyncio.run(pool.run(rows))
        loaded = figures()
        pool.unload("m")
        results.append({"cycle": cycle, "before": before, "loaded": loaded, "after": figures()})
    return results


ADMIN_KEY = "bench-admin"


def measure_server(models: dict[str, Path], backend: str, device: str, cycles: int) -> dict[str, list[dict]]:
    """Each model's cycles through one server's admin API, the TextEmbedder process's RSS at each step."""
    import tempfile

    import httpx
    import psutil
    import yaml

    from bench.load import corpus
    from bench.server import free_port, start_server, stop_server

    settings = {"backend": backend, "device": device, "batch_size": 32, "load": "lazy"}
    config = {
        "models": [{"model_id": str(path), "served_model_name": name, **settings} for name, path in models.items()],
        "admin_key": ADMIN_KEY,
    }
    folder = Path(tempfile.mkdtemp(prefix="model-memory-"))
    (folder / "embento.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    server = start_server(port, EMBENTO_CONFIG=str(folder / "embento.yaml"))
    url, admin = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {ADMIN_KEY}"}
    try:
        service = next(p for p in psutil.Process(server.pid).children(recursive=True) if "TextEmbedder" in p.cmdline())

        def figures() -> dict:
            return {"rss_mib": service.memory_info().rss / MIB}

        found: dict[str, list[dict]] = {}
        for name in models:
            results = found.setdefault(name, [])
            for cycle in range(cycles + 1):
                before = figures()
                httpx.post(f"{url}/admin/models/{name}/load", headers=admin, timeout=600).raise_for_status()
                body = {"model": name, "input": corpus(SENTENCES, 8, 40)}
                httpx.post(f"{url}/v1/embeddings", json=body, timeout=600).raise_for_status()
                loaded = figures()
                httpx.post(f"{url}/admin/models/{name}/unload", headers=admin, timeout=600).raise_for_status()
                results.append({"cycle": cycle, "before": before, "loaded": loaded, "after": figures()})
        return found
    finally:
        stop_server(server)


def report(name: str, backend: str, results: list[dict]) -> None:
    for result in results:
        line = [f"{name} | {backend} | {result['cycle']}"]
        for key in result["before"]:
            before, loaded, after = (result[stage][key] for stage in ("before", "loaded", "after"))
            line.append(f"{key} {before:.0f} → {loaded:.0f} → {after:.0f} (kept {after - before:+.0f})")
        print(" | ".join(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="torch", choices=["torch", "onnx", "auto"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--server", action="store_true", help="through a server's admin API")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child process: one model's cycles
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.backend, args.device, args.cycles)))
        return
    from bench.base_checkpoint import build
    from models.resolve import packaged_model_path

    models = {"all-MiniLM-L6-v2": packaged_model_path("sentence-transformers/all-MiniLM-L6-v2"), "BERT-base": build()}
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; device {args.device}")
    print("model | backend | cycle | before → loaded → after, MiB")
    if args.server:  # one server, the TextEmbedder process measured: MiniLM's cycles, then BERT-base's
        for name, results in measure_server(models, args.backend, args.device, args.cycles).items():
            report(name, args.backend, results)
        return
    for name, path in models.items():
        command = [sys.executable, __file__, "--measure", str(path), "--backend", args.backend]
        command += ["--device", args.device, "--cycles", str(args.cycles)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "BENTOML_DO_NOT_TRACK": "True"}
        output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        report(name, args.backend, json.loads(output.splitlines()[-1]))


if __name__ == "__main__":
    main()
