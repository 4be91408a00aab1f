"""ONNX Runtime against torch on a CPU, in process: pass time by batch, how to spread a batch over the cores,
and what an export costs. The figures behind `backend: auto` (models/auto_backend.py) and the lanes rule
(models/lanes.py).

    python bench/onnx_cpu.py [--models minilm base] [--repeats 15] [--attention]

`base` is a BERT-base shape (12 layers x 768) with random weights and MiniLM's tokenizer, built once by
bench/base_checkpoint.py when present, else here. Every figure is the median of `--repeats` passes after two
warm-up passes; the backends alternate within each round so drift hits both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("EMBENTO_CACHE_DIR", tempfile.mkdtemp(prefix="onnx-cpu-"))

from models.resolve import packaged_model_path  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SENTENCE = "Self-hosted embedding servers keep the data in house and the cost fixed across the year"


def base_checkpoint() -> Path:
    folder = Path(tempfile.gettempdir()) / "embento-bench-bert-base"
    if (folder / "model.safetensors").is_file():
        return folder
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig()).save_pretrained(folder)
    minilm = packaged_model_path(MINILM)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (folder / name).write_bytes((minilm / name).read_bytes())
    return folder


def median_ms(run: Callable[[], object], repeats: int) -> float:
    run()
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def session(path: Path, threads: int, spinning: bool = True):  # -> onnxruntime.InferenceSession
    import onnxruntime

    from models.onnx_runtime import session_options

    options = session_options(threads)
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["minilm", "base"], choices=["minilm", "base"])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--attention",
        action="store_true",
        help="only: the export with transformers' eager attention (used) against SDPA",
    )
    args = parser.parse_args()
    if args.attention:
        for name in args.models:
            compare_attention(
                name, packaged_model_path(MINILM) if name == "minilm" else base_checkpoint(), args.repeats
            )
        return

    import torch
    from transformers import AutoModel, AutoTokenizer

    from models.onnx_export import EXPORTED, exported_checkpoint

    torch.set_num_threads(2)
    lanes = ThreadPoolExecutor(2)
    for _ in range(2):  # each lane thread runs torch on one intra-op thread
        lanes.submit(torch.set_num_threads, 1).result()
    for name in args.models:
        folder = packaged_model_path(MINILM) if name == "minilm" else base_checkpoint()
        start = time.perf_counter()
        entry = exported_checkpoint(folder, "feature-extraction")
        print(f"\n## {name}: export {time.perf_counter() - start:.1f} s (cached entries take ~0 s)")
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModel.from_pretrained(str(folder)).eval()
        start = time.perf_counter()
        whole = session(entry / EXPORTED, 2)
        print(f"session with all graph optimizations: {time.perf_counter() - start:.2f} s to open")
        single = session(entry / EXPORTED, 1)
        quiet = session(entry / EXPORTED, 2, spinning=False)
        print(
            "| batch | torch 2 threads | ORT 2 threads | speed-up | max abs diff | ORT 2 lanes x 1 thread | "
            "ORT 2 lanes on the 2-thread session | same, no spinning | torch 2 lanes x 1 thread |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for batch in (1, 10, 32, 64):
            features = tokenizer([SENTENCE] * batch, padding=True, return_tensors="np")
            feeds = {key: value for key, value in features.items() if key in {i.name for i in whole.get_inputs()}}
            halves = [
                {key: value[part] for key, value in feeds.items()}
                for part in (slice(0, max(1, batch // 2)), slice(max(1, batch // 2), batch))
            ]
            tensors = {key: torch.from_numpy(value) for key, value in features.items()}

            def torch_pass(inputs=tensors, model=model) -> np.ndarray:
                with torch.inference_mode():
                    return model(**inputs).last_hidden_state.numpy()

            def split(run: Callable[[dict], object], halves=halves) -> Callable[[], object]:
                parts = [half for half in halves if len(half["input_ids"])]
                return lambda: [f.result() for f in [lanes.submit(run, part) for part in parts]]

            torch_halves = [
                {key: value[part] for key, value in tensors.items()}
                for part in (slice(0, max(1, batch // 2)), slice(max(1, batch // 2), batch))
            ]
            figures = {
                "torch": median_ms(torch_pass, args.repeats),
                "ort": median_ms(lambda whole=whole, feeds=feeds: whole.run(None, feeds), args.repeats),
                "ort lanes": median_ms(split(lambda half, single=single: single.run(None, half)), args.repeats),
                "ort lanes shared": median_ms(split(lambda half, whole=whole: whole.run(None, half)), args.repeats),
                "ort lanes quiet": median_ms(split(lambda half, quiet=quiet: quiet.run(None, half)), args.repeats),
                "torch lanes": median_ms(
                    lambda torch_halves=torch_halves: [
                        f.result()
                        for f in [lanes.submit(torch_pass, half) for half in torch_halves if len(half["input_ids"])]
                    ],
                    args.repeats,
                ),
            }
            diff = float(np.abs(whole.run(None, feeds)[0] - torch_pass()).max())
            print(
                f"| {batch} | {figures['torch']:.1f} ms | {figures['ort']:.1f} ms | "
                f"{figures['torch'] / figures['ort']:.2f}x | {diff:.1e} | {figures['ort lanes']:.1f} ms | "
                f"{figures['ort lanes shared']:.1f} ms | {figures['ort lanes quiet']:.1f} ms | "
                f"{figures['torch lanes']:.1f} ms |",
                flush=True,
            )
    print(f"\nload average after: {os.getloadavg()}")


def compare_attention(name: str, folder: Path, repeats: int) -> None:
    """The graph exported with transformers' eager attention (what models/onnx_export.py exports) against the
    one exported with SDPA: ONNX Runtime's pass time at 1 and 32 rows, interleaved per round, and how far the
    two graphs' outputs are apart."""
    from transformers import AutoTokenizer

    from models.onnx_export import export_graph

    work = Path(tempfile.mkdtemp(prefix="attention-"))
    sessions = {}
    for attention in ("eager", "sdpa"):
        export_graph(folder, "feature-extraction", work / f"{attention}.onnx", attention=attention)
        sessions[attention] = session(work / f"{attention}.onnx", 2, spinning=False)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    print(f"\n## {name}: export with eager against SDPA attention (median ms of {repeats})")
    print("| rows | eager | sdpa | sdpa / eager | max abs diff |")
    print("|---|---|---|---|---|")
    for rows in (1, 32):
        feeds = dict(tokenizer([SENTENCE] * rows, padding=True, return_tensors="np"))
        feeds = {key: value for key, value in feeds.items() if key in {i.name for i in sessions["eager"].get_inputs()}}
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(repeats):
            for name, ort in sessions.items():
                times[name].append(median_ms(lambda ort=ort, feeds=feeds: ort.run(None, feeds), 3))
        eager, sdpa = (statistics.median(times[name]) for name in ("eager", "sdpa"))
        diff = float(np.abs(sessions["eager"].run(None, feeds)[0] - sessions["sdpa"].run(None, feeds)[0]).max())
        print(f"| {rows} | {eager:.2f} | {sdpa:.2f} | {sdpa / eager:.2f} | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
