"""Idle memory of a server serving all-MiniLM-L6-v2 (`backend: auto`, its ONNX export and parity verdict made
beforehand, as a Bento's build or an earlier start leaves them): the whole process tree's RSS and each
service's, once ready, after one request and `IDLE_SETTLE_S`. With `--before DIR`, another checkout of the
bundle (say `git archive main | tar -x -C DIR`, with this .venv linked into it) is measured the same way first,
in the same run, and the ratio printed (issue 51: a torch-free text model service, tree RSS <= 0.75x).

    python bench/idle_memory.py [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from load import tree_rss_mb  # noqa: E402
from run_all import IDLE_SETTLE_S  # noqa: E402
from server import ROOT, free_port, start_server, stop_server  # noqa: E402
from soak import rss_by_process  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def idle_rss(bundle: Path, config: Path) -> tuple[float, dict[str, float]]:
    """(tree MiB, MiB by service) of a server of `bundle` serving `config`, idle after one request."""
    port = free_port()
    process = start_server(port, cwd=bundle, EMBENTO_CONFIG=str(config))
    try:
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/embeddings", json={"model": MINILM, "input": ["one sentence"]}, timeout=120
        )
        response.raise_for_status()
        time.sleep(IDLE_SETTLE_S)
        return tree_rss_mb(process.pid), rss_by_process(process.pid)
    finally:
        stop_server(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout of the bundle, measured first")
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
    figures = {}
    for name, bundle in [("before", args.before), ("after", ROOT)]:
        if bundle is None:
            continue
        tree, by_service = idle_rss(bundle.resolve(), config)
        figures[name] = tree
        services = ", ".join(f"{service} {mib:.0f}" for service, mib in sorted(by_service.items()))
        print(f"{name} ({bundle}): tree {tree:.0f} MiB ({services})")
    if "before" in figures:
        print(f"after / before: {figures['after'] / figures['before']:.2f}")


if __name__ == "__main__":
    main()
