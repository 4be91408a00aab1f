"""ONNX Runtime: its sessions' settings, the dynamic-int8 form of an export (`models.inference.onnx_export`), cached
beside it, and the export run in place of a sentence-transformers Transformer module's torch model.
"""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path
from typing import Any

from config.errors import ModelLoadError, one_line
from models.inference.onnx_export import EXPORTED, OPTIMIZATION, exported_checkpoint

logger = logging.getLogger(__name__)
# The quantized graph's folder names _quantize's settings (bump the version when they change) and the preset
# of the CPU that made it, so a cache_dir shared across kinds of CPU never hands one the other's file.
QUANTIZED = "onnx/qint8-v4-{preset}/model_qint8.onnx"
# Each preset's weight type (`quantization_preset` says why); activations are u8 on all, as ONNX Runtime's
# dynamic quantization makes them.
WEIGHT_TYPES = {"avx512_vnni": "QInt8", "avx2": "QUInt8", "arm64": "QInt8"}


def onnx_checkpoint(folder: Path, task: str, quantize: bool) -> tuple[Path, str]:
    """(the export's cache entry, the graph file inside it to run), exporting and quantizing at most once."""
    entry = exported_checkpoint(folder, task)
    if not quantize:
        return entry, EXPORTED
    preset = quantization_preset()
    quantized = QUANTIZED.format(preset=preset)
    if not (entry / quantized).is_file():
        _quantize(entry / EXPORTED, entry / quantized, preset)
    return entry, quantized


OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def session_options(threads: int) -> Any:
    """ONNX Runtime's threads from the CPU budget torch was given, not its own default of every core.

    Its workers do not spin while they wait for work. A model service runs one batch as concurrent passes on
    one session, one per lane (models/inference/lanes.py), and shares the cores with its gateway: spinning workers took
    the cores those passes needed. all-MiniLM-L6-v2, 2 cores, 32 rows in 2 lanes: 248 ms spinning, 193 ms
    not, 185 ms on single-thread sessions; a lone row on both threads: the same 9 ms either way
    (853238e:bench/onnx_cpu.py, on a machine another process kept one core busy)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, OPTIMIZATION_LEVELS[OPTIMIZATION])
    return options


def providers(device: str) -> list[Any]:
    """The execution providers for a device, as `InferenceSession` takes them. Without a `device_id`, ONNX
    Runtime's CUDA provider runs on GPU 0 whatever `cuda:N` says."""
    if not device.startswith("cuda"):
        return ["CPUExecutionProvider"]
    _, _, index = device.partition(":")
    return [("CUDAExecutionProvider", {"device_id": int(index or 0)}), "CPUExecutionProvider"]


def attach_session(transformer: Any, folder: Path, task: str, quantize: bool, device: str, threads: int) -> None:
    """The Transformer module of a loaded sentence-transformers model runs the checkpoint's export on ONNX
    Runtime from now on, its torch weights let go; its Pooling, Dense and Normalize modules stay."""
    from models.inference.onnx_model import OnnxTransformerModel

    entry, file_name = onnx_checkpoint(folder, task, quantize)
    try:
        transformer.model = OnnxTransformerModel(
            entry / file_name, transformer.model.config, task, device, session_options(threads), providers(device)
        )
    except Exception as exc:  # ONNX Runtime refused the graph
        raise ModelLoadError(f"ONNX Runtime cannot open {entry / file_name}: {one_line(exc)}") from exc


def _quantize(exported: Path, target: Path, preset: str) -> None:
    """Dynamic int8 of the MatMuls that have a weight, per channel, by ONNX Runtime's own quantizer; the
    embeddings (Gather) and attention's activation-by-activation MatMuls stay float32. ONNX Runtime scales
    activations per tensor, one scale for the whole padded batch, which costs short inputs most: every int8
    input left out helps them, and the graph runs faster so (figures: 853238e:bench/onnx_int8.py, docs/models.md,
    int8). The file grows from 22 to 57 MB on all-MiniLM-L6-v2 (float32 embeddings)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logger.info("quantizing %s to dynamic int8, once", exported)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / f".quantize-{os.getpid()}.onnx"
    graph = onnx.load(str(exported))
    # The quantizer infers every shape again, and rejected a classifier head's that the exporter recorded
    # ("Inferred shape and existing shape differ": 384 vs 1); inferred from nothing, they agree.
    del graph.graph.value_info[:]
    try:
        quantize_dynamic(
            graph,
            scratch,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            weight_type=QuantType[WEIGHT_TYPES[preset]],
            nodes_to_exclude=float_matmuls(exported),
            extra_options={"WeightSymmetric": True, "ActivationSymmetric": False},
        )
        os.replace(scratch, target)
    except Exception as exc:
        raise ModelLoadError(f"cannot quantize {exported}: {exc}") from exc
    finally:
        scratch.unlink(missing_ok=True)


def float_matmuls(model: Path) -> list[str]:
    """The MatMuls that stay float32: attention's Q.K^T and P.V (two activations, no weight to quantize ahead
    of time) and every down-projection (a weight of more rows than columns: the feed-forward block's output
    layer, a classifier head). A down-projection reads the activation function's output, whose few outlier
    features set the one per-tensor activation scale and leave every other feature a handful of steps; on
    all-MiniLM-L6-v2 keeping them float32 lifts the worst cosine to float32 from 0.970 to 0.98+ on an AVX2
    EPYC (853238e:bench/onnx_int8.py)."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    constants = set(shapes) | {out for node in graph.node if node.op_type == "Constant" for out in node.output}

    def keeps_float(node: onnx.NodeProto) -> bool:
        weights = [shapes.get(name) for name in node.input if name in constants]
        if not weights:
            return True
        shape = weights[0]
        return shape is not None and len(shape) == 2 and shape[0] > shape[1]

    return [node.name for node in graph.node if node.op_type == "MatMul" and keeps_float(node)]


def quantization_preset() -> str:
    """The quantization preset for this CPU (optimum's names, kept so that caches keep their folders). s8
    weights where it has VNNI (avx512_vnni or avx_vnni: ONNX Runtime multiplies u8 x s8 in 32 bits there); u8
    weights elsewhere, as u8 x s8 without VNNI goes through vpmaddubsw, whose 16-bit pair sums saturate (min
    cosine 0.9891 instead of 0.9917), while u8 x u8 is widened first and stays exact. The 7-bit reduced range
    avoids the saturation too but costs more (0.9875)."""
    if platform.machine().lower() in ("arm64", "aarch64"):
        return "arm64"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    return "avx512_vnni" if "vnni" in flags else "avx2"
