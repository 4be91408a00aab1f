"""Idle memory and warm start of a server of all-MiniLM-L6-v2 (`backend: auto`, its ONNX export and verdict made
beforehand, as a Bento's build leaves them): seconds to /readyz, then the tree's and each service's RSS after one
request and IDLE_SETTLE_S. `--before DIR` measures another checkout too (`git archive COMMIT | tar -x -C DIR`,
this .venv linked into it), alternating `--starts` times, and prints the ratios. Figures: docs/architecture.md's
"Warm start and idle memory".

    python bench/idle_memory.py [--before DIR] [--starts 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from load import tree_rss_mb  # noqa: E402
from run_all import IDLE_SETTLE_S  # noqa: E402
from server import ROOT, free_port, start_server, stop_server  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
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


def idle_rss(bundle: Path, config: Path) -> tuple[float, float, dict[str, float]]:
    """(seconds to ready, tree MiB, MiB by service) of a server of `bundle` serving `config`, idle after one
    request."""
    port = free_port()
    started = time.perf_counter()
    process = start_server(port, cwd=bundle, EMBENTO_CONFIG=str(config))
    ready_s = time.perf_counter() - started
    try:
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/embeddings", json={"model": MINILM, "input": ["one sentence"]}, timeout=120
        )
        response.raise_for_status()
        time.sleep(IDLE_SETTLE_S)
        return ready_s, tree_rss_mb(process.pid), rss_by_process(process.pid)
    finally:
        stop_server(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout of the bundle, measured first")
    parser.add_argument("--starts", type=int, default=3, help="starts of each bundle, alternating")
    args = parser.parse_args()
    from config import settings
    from config.settings import ModelConfig
    from models.inference.auto_backend import check_export
    from models.resolve import packaged_model_path

    cache = Path(tempfile.mkdtemp(prefix="embento-idle-"))
    config = cache / "embento.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(cache), "models": [{"model_id": MINILM}]}))
    os.environ["EMBENTO_CACHE_DIR"] = str(cache)  # the export and its verdict, made here, where both servers read
    settings.get_config.cache_clear()
    folder = packaged_model_path(MINILM)
    assert folder is not None
    print("export:", check_export(folder, ModelConfig(model_id=MINILM), "embed").reason)
    figures: dict[str, list[tuple[float, float]]] = {}
    bundles = [(name, bundle) for name, bundle in [("before", args.before), ("after", ROOT)] if bundle is not None]
    for _ in range(args.starts):
        for name, bundle in bundles:
            ready_s, tree, by_service = idle_rss(bundle.resolve(), config)
            figures.setdefault(name, []).append((ready_s, tree))
            services = ", ".join(f"{service} {mib:.0f}" for service, mib in sorted(by_service.items()))
            print(f"{name} ({bundle}): ready in {ready_s:.1f} s; tree {tree:.0f} MiB ({services})")
    medians = {name: [statistics.median(f[i] for f in runs) for i in (0, 1)] for name, runs in figures.items()}
    for name, (ready_s, tree) in medians.items():
        print(f"{name}: median ready in {ready_s:.1f} s, tree {tree:.0f} MiB")
    if "before" in medians:
        (ready_before, tree_before), (ready_after, tree_after) = medians["before"], medians["after"]
        print(f"after / before: warm start {ready_after / ready_before:.2f}, tree RSS {tree_after / tree_before:.2f}")


if __name__ == "__main__":
    main()
