"""The GPU check (run by bench/gpu_check.sh): random-weight MiniLM-sized and bge-large-sized checkpoints on
DEV (cuda, or cpu for a dry run), measured in-process and through the server.

    python bench/gpu_check.py --dev cuda --tokenizer DIR --out DIR [--server]

In-process: load time and parity against float32 on CPU per dtype; every kind loaded and run in bf16 (tiny
checkpoints, CLAP and CTranslate2 included); pass throughput by pass size, launched passes waited once
(the pool's GPU path) against one forward after another. Through the server (`--server`, needs bentoml):
sentences/s at 64 x 1, 256 x 1 and 64 x 32 clients x sentences, default settings and tuned, against the
in-process ceiling at the same pass size, with each service's CPU (% of one core) while the load ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SIZES = {  # hidden, layers, heads, intermediate
    "minilm": (384, 6, 12, 1536),
    "bge-large": (1024, 24, 16, 4096),
}
PASS_SIZES = (32, 128, 512)
DRY_RUN_PASS_SIZES = (8, 32)  # on CPU, where a pass of 512 bge-large rows takes a minute
SCENARIOS = ((64, 1), (256, 1), (64, 32))
SENTENCES = [
    f"platform team {i} keeps its embeddings on its own servers for data control and a fixed cost" for i in range(2048)
]


def build_encoder(folder: Path, tokenizer: Path, size: str) -> Path:
    """A sentence-transformers folder (Transformer, mean Pooling, Normalize) with random BERT weights."""
    from sentence_transformers import SentenceTransformer, models

    from tests.checkpoints import build_tiny_bert

    hidden, layers, heads, intermediate = SIZES[size]  # the tests' BERT, grown to this model's size
    raw = build_tiny_bert(
        folder / "raw",
        tokenizer,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
    )
    transformer = models.Transformer(str(raw), max_seq_length=256)
    SentenceTransformer(modules=[transformer, models.Pooling(hidden, "mean"), models.Normalize()]).save(str(folder))
    return folder


def encoder(folder: Path, device: str, dtype: str):  # -> TextEncoder, load seconds
    from config.settings import ModelConfig
    from models.text_encoder import TextEncoder

    started = time.perf_counter()
    model = TextEncoder(folder, ModelConfig(model_id=str(folder), device=device, dtype=dtype))
    return model, time.perf_counter() - started


def rows_of(model, texts: list[str]) -> list:
    from config.settings import ModelConfig
    from models.base import TokenizedText
    from models.text_tokenizer import TextTokenizer

    tokenizer = TextTokenizer(Path(model.info.model_id), ModelConfig(model_id=model.info.model_id), "embed")
    return TokenizedText.rows(model.info.served_model_name, tokenizer.encode_texts(texts))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def throughput(model, rows: list, pass_size: int, device: str, launched: bool, seconds: float = 3.0) -> float:
    """Sentences per second, passes of `pass_size`: all launched then waited, or forward after forward."""
    passes = [rows[i : i + pass_size] for i in range(0, len(rows) - pass_size + 1, pass_size)]
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        if launched:
            for pending in [model.launch(p) for p in passes]:
                pending.wait()
        else:
            for p in passes:
                model.forward(p)
        done += pass_size * len(passes)
    sync(device)
    return done / (time.perf_counter() - started)


def in_process(dev: str, tokenizer: Path, work: Path, report: dict) -> None:
    import numpy as np

    dtypes = ["float32"] if dev == "cpu" else ["float16", "bfloat16"]
    for size in SIZES:
        folder = build_encoder(work / size, tokenizer, size)
        reference, _ = encoder(folder, "cpu", "float32")
        rows = rows_of(reference, SENTENCES[:64])
        expected = reference.forward(rows)
        for dtype in dtypes:
            model, load_s = encoder(folder, dev, dtype)
            got = model.forward(rows)
            cosines = (got * expected).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
            sizes = DRY_RUN_PASS_SIZES if dev == "cpu" else PASS_SIZES
            all_rows = rows_of(model, SENTENCES[: 4 * max(sizes)])
            rates = {f"{n} launched": throughput(model, all_rows, n, dev, True) for n in sizes}
            rates.update({f"{n} forward": throughput(model, all_rows, n, dev, False) for n in sizes})
            report[f"{size} {dtype}"] = {
                "load_s": round(load_s, 2),
                "min_cosine_vs_fp32_cpu": float(cosines.min()),
                "sent_per_s_by_pass": {k: round(v) for k, v in rates.items()},
            }
            print(size, dtype, report[f"{size} {dtype}"], flush=True)


def every_kind(dev: str, tokenizer: Path, work: Path, report: dict) -> None:
    """Each kind's tiny checkpoint loaded and run in bf16 (CTranslate2: its bfloat16 compute type)."""
    from config.settings import ModelConfig
    from tests import checkpoints

    builders = {
        "clip": lambda f: checkpoints.build_clip(f, tokenizer),
        "clap": checkpoints.build_clap,
        "colpali": checkpoints.build_colpali,
        "splade": lambda f: checkpoints.build_splade(f, tokenizer),
        "reranker": lambda f: checkpoints.build_minilm_cross_encoder(f, tokenizer, ["score"]),
        "qwen3-embedder": checkpoints.build_qwen3_embedder,
        "qwen3-reranker": checkpoints.build_qwen3_reranker,
        "bert-ctranslate2": lambda f: build_encoder(f, tokenizer, "minilm"),
    }
    for name, build in builders.items():
        try:
            folder = build(work / name)
            backend = "ctranslate2" if name == "bert-ctranslate2" else "torch"
            cfg = ModelConfig(model_id=str(folder), device=dev, dtype="bfloat16", backend=backend)
            report[f"kind {name} bf16"] = run_one_kind(folder, cfg)
        except Exception as exc:  # reported, and the check goes on
            report[f"kind {name} bf16"] = f"FAILED: {exc!r}"
            traceback.print_exc()
        print(name, report[f"kind {name} bf16"], flush=True)


def run_one_kind(folder: Path, cfg) -> str:
    """One input through the kind's own model class, as the model service loads it."""
    import numpy as np

    from models.base import TokenizedText
    from models.kinds import model_kind
    from models.media_encoder import MediaEncoder
    from models.sparse_encoder import SparseTextEncoder
    from models.text_encoder import TextEncoder
    from models.text_scorer import TextScorer
    from models.text_tokenizer import TextTokenizer

    kind = model_kind(cfg)
    name = cfg.served_model_name
    if kind in ("clip", "clap", "colpali"):
        model = MediaEncoder(folder, cfg, kind)
        rows = model.processor.warmup_rows(name)
    elif kind in ("rerank", "classify"):
        model = TextScorer(folder, cfg, kind)
        rows = TokenizedText.rows(name, *TextTokenizer(folder, cfg, kind).encode_pairs("a query", ["a document"]))
    else:
        model = SparseTextEncoder(folder, cfg) if kind == "sparse" else TextEncoder(folder, cfg)
        rows = TokenizedText.rows(name, TextTokenizer(folder, cfg, kind).encode_texts(["a sentence"]))
    outputs = [np.asarray(o) for o in model.forward(rows)]
    finite = all(np.isfinite(o).all() for o in outputs)
    return f"ok ({model.info.kind}, {model.info.dtype}, output {outputs[0].shape}, finite {finite})"


def through_server(dev: str, work: Path, report: dict, seconds: float) -> None:
    import yaml

    from bench.server import closed_loop, free_port, start_server, stop_server

    for size in SIZES if dev != "cpu" else ["minilm"]:  # bge-large through a CPU server: minutes per run
        folder = work / size
        for setting, extra in (("default", {}), ("tuned", {"EMBENTO_GATEWAY_WORKERS": "8"})):
            config = work / f"{size}-{setting}.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "models": [{"model_id": str(folder), "served_model_name": size, "device": dev}],
                        "max_concurrent_requests": 4096,
                    }
                )
            )
            port = free_port()
            server = start_server(port, EMBENTO_CONFIG=str(config), **extra)
            try:
                for clients, per_request in SCENARIOS:

                    def request_for(batch: list[str], size: str = size) -> tuple[str, dict]:
                        return "/v1/embeddings", {"model": size, "input": batch}

                    url = f"http://127.0.0.1:{port}"
                    asyncio.run(closed_loop(url, request_for, SENTENCES, 2.0, clients, per_request))
                    before, started = cpu_seconds(server.pid), time.perf_counter()
                    rate, _ = asyncio.run(closed_loop(url, request_for, SENTENCES, seconds, clients, per_request))
                    wall, after = time.perf_counter() - started, cpu_seconds(server.pid)
                    cpu = {name: round(100 * (after[name] - before.get(name, 0.0)) / wall) for name in after}
                    key = f"server {size} {setting} {clients}x{per_request}"
                    report[key] = {"sent_per_s": round(rate), "cpu_percent_by_process": cpu}
                    print(key, report[key], flush=True)
            finally:
                stop_server(server)


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds so far of the server's processes, summed by service (the arbiter on its own)."""
    import psutil

    usage: dict[str, float] = {}
    for process in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        command = " ".join(process.cmdline())
        name = command.split("--service-name ")[1].split()[0] if "--service-name" in command else "arbiter"
        times = process.cpu_times()
        usage[name] = usage.get(name, 0.0) + times.user + times.system
    return usage


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dev", default="cuda")
    parser.add_argument("--tokenizer", type=Path, required=True, help="a folder with MiniLM's tokenizer files")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--server", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # the script's timeout: servers still stopped
    report: dict = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for step in (
            lambda: in_process(args.dev, args.tokenizer, work, report),
            lambda: every_kind(args.dev, args.tokenizer, work, report),
            lambda: args.server and through_server(args.dev, work, report, args.seconds),
        ):
            try:
                step()
            except Exception as exc:
                report.setdefault("errors", []).append(repr(exc))
                traceback.print_exc()
            (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
