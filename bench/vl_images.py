"""Images per second of a tiny Qwen3-VL-Embedding through the server against in process (one request loop per
core), in one run. Figures: docs/models.md. The checkpoint is the test suite's (testkit/vl_checkpoints.py), built
in the Qwen3-VL reference venv (`make vl-reference-venv`); images are 256 x 256 PNGs of noise.

    .venv/bin/python bench/vl_images.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.server import closed_loop, free_port, start_server, stop_server  # noqa: E402
from testkit.media import image_bytes  # noqa: E402

IMAGES, SIDE, PER_REQUEST, IN_FLIGHT = 32, 256, 8, 4
MODEL = "tiny-qwen3-vl-embedding"


def build(folder: Path) -> Path:
    subprocess.run(["make", "vl-reference-venv"], cwd=ROOT, check=True, capture_output=True)
    python = ROOT / ".venv-vl-reference" / "bin" / "python"
    subprocess.run([str(python), "-m", "testkit.vl_checkpoints", "build", str(folder)], cwd=ROOT, check=True)
    return folder


def in_process(folder: Path, pictures: list[bytes], seconds: float) -> float:
    """One request loop per core, each pass on one torch thread, as the server's lanes run them (two threads per
    pass on this 2-core machine were 7x slower than one: the cores are shared)."""
    import torch

    from config.settings import ModelConfig
    from models.inference.vl_encoder import VisionLanguageEncoder
    from models.media import MediaLimits

    torch.set_num_threads(1)
    encoder = VisionLanguageEncoder(folder, ModelConfig(model_id=str(folder)), "vl-embed")
    limits = MediaLimits(max_item_bytes=1 << 24, max_image_pixels=1 << 26, max_audio_seconds=30)
    started = time.perf_counter()

    def loop(lane: int) -> int:
        torch.set_num_threads(1)
        done, at = 0, lane * PER_REQUEST
        while time.perf_counter() - started < seconds:
            batch = [(("image", pictures[(at + i) % len(pictures)]),) for i in range(PER_REQUEST)]
            encoder.forward(encoder.processor.encode(MODEL, batch, limits))
            done, at = done + PER_REQUEST, at + PER_REQUEST
        return done

    lanes = os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=lanes) as pool:
        done = sum(pool.map(loop, range(lanes)))
    return done / (time.perf_counter() - started)


def through_server(folder: Path, pictures: list[bytes], seconds: float) -> float:
    uris = ["data:image/png;base64," + base64.b64encode(picture).decode() for picture in pictures]
    corpus = [str(i) for i in range(len(uris))]

    def request_for(batch: list[str]) -> tuple[str, dict]:
        return "/v1/embeddings", {"model": MODEL, "input": [{"image": uris[int(i)]} for i in batch]}

    port = free_port()
    process = start_server(port, EMBENTO_MODEL_ID=str(folder), EMBENTO_SERVED_MODEL_NAME=MODEL)
    try:
        url = f"http://127.0.0.1:{port}"
        asyncio.run(closed_loop(url, request_for, corpus, 3, IN_FLIGHT, PER_REQUEST))  # warm-up
        rate, _ = asyncio.run(closed_loop(url, request_for, corpus, seconds, IN_FLIGHT, PER_REQUEST))
        return rate
    finally:
        stop_server(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    seconds = parser.parse_args().seconds
    pictures = [image_bytes(SIDE, SIDE, seed=i) for i in range(IMAGES)]
    with tempfile.TemporaryDirectory() as work:
        folder = build(Path(work) / "vl")
        ceiling = in_process(folder, pictures, seconds)
        served = through_server(folder, pictures, seconds)
    print(
        json.dumps(
            {
                "in_process_images_s": round(ceiling, 1),
                "server_images_s": round(served, 1),
                "server_over_in_process": round(served / ceiling, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
