"""`load_model`: a checkpoint in the class that runs its kind, on its backend.

`backend: auto`: ONNX Runtime on a CPU where the model exports and matches torch; torch everywhere else.

On a 2-core AMD EPYC, all-MiniLM-L6-v2 runs a pass of one sentence 2.3x as fast on ONNX Runtime as on torch,
and 32 sentences 1.2x (853238e:bench/onnx_cpu.py), with the same vectors to 2e-6. That holds only where the export
is faithful, so before ONNX Runtime serves a model its outputs on fixed texts are compared with torch's:
vectors at cosine >= 0.99999, scores within 1e-4 (relative, or absolute below 1). The verdict is kept in the
export's cache entry, whose key names everything it depends on (`models.inference.onnx_export.ExportKey`), so it is
taken once, like the export. On a GPU torch stays: it runs in half precision there.
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.adapters import check_task_adapters, find_tasks
from models.base import TokenizedText, TokenModel
from models.inference.host import on_cpu_without_torch, torch_threads
from models.inference.saved_versions import check_saved_versions
from models.kinds import Kind, model_class, model_kind, model_scorer, spec, torch_free_class
from models.quantization import CALIBRATION_TEXTS

logger = logging.getLogger(__name__)
MIN_COSINE = 0.99999
MAX_RELATIVE_ERROR = 1e-4
PARITY_TEXTS = 12
MAX_WEIGHT_BYTES = 2 << 30  # protobuf's limit on one ONNX file; larger models are decoders meant for GPUs
VERDICT_FILE = "parity.json"
ModelClass = Callable[[Path, ModelConfig, Kind], TokenModel]


@dataclass(frozen=True)
class Verdict:
    """Whether the ONNX export reproduces torch on the parity texts, and by how much."""

    matches: bool
    detail: str
    ran: bool = True  # False: the export failed, or its session or first pass did

    @property
    def reason(self) -> str:
        if self.matches:
            return f"onnx: its export matches torch ({self.detail})"
        if not self.ran:
            return f"torch: {self.detail}"
        return f"torch: the ONNX export does not match torch ({self.detail})"


def load_auto(model_class: ModelClass, folder: Path, cfg: ModelConfig, kind: Kind) -> TokenModel:
    """The model on ONNX Runtime when it qualifies and matches, else on torch; its `info` says which and why."""
    unfit = onnx_unfit(folder, cfg, kind) or _off_cpu(cfg)
    if unfit is not None:
        return _chosen(model_class(folder, _on(cfg, "torch"), kind), unfit)
    verdict, loaded = _verdict(model_class, folder, cfg, kind)
    backend = "onnx" if verdict.matches else "torch"
    model = loaded.get(backend) or model_class(folder, _on(cfg, backend), kind)
    loaded.clear()  # the other one goes now, not at the next collection
    gc.collect()
    return _chosen(model, verdict.reason)


def check_export(folder: Path, cfg: ModelConfig, kind: Kind) -> Verdict:
    """Export and compare on the CPU now, recording both (a build does, so that its Bento starts with neither)."""
    return _verdict(model_class(kind), folder, cfg.model_copy(update={"device": "cpu"}), kind)[0]


def onnx_unfit(folder: Path, cfg: ModelConfig, kind: Kind) -> str | None:
    """Why ONNX Runtime is not even tried for this model wherever it runs (None: it is, on a CPU)."""
    if spec(kind).onnx_task is None:
        return f"torch: ONNX Runtime does not run {kind} models here"
    if model_scorer(folder, kind) == "causal-lm":
        return "torch: a causal-LM reranker runs on torch only"
    if find_tasks(folder):
        return "torch: its task adapters (peft LoRA) run on torch only"
    if cfg.dtype not in ("auto", "float32"):
        return f"torch: dtype {cfg.dtype} runs on torch"
    if weight_bytes(folder) > MAX_WEIGHT_BYTES:
        return "torch: its weights pass 2 GiB, a single ONNX file's limit (and minutes of export on a CPU)"
    return None


def weight_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for pattern in ("*.safetensors", "*.bin") for path in folder.glob(pattern))


def _off_cpu(cfg: ModelConfig) -> str | None:
    if on_cpu_without_torch(cfg.device):
        return None
    from models.inference.device import pick_device

    device = pick_device(cfg.device)
    return None if device == "cpu" else f"torch: on {device}, torch runs it in half precision"


def _verdict(
    model_class: ModelClass, folder: Path, cfg: ModelConfig, kind: Kind
) -> tuple[Verdict, dict[str, TokenModel]]:
    """The export's verdict as its cache entry records it, else taken now: exporting, loading it on both
    backends and comparing; with the models loaded for it, by backend, for the caller to keep one. A failed
    export is recorded too, so no later start tries it again."""
    from models.inference.onnx_export import onnx_entry, write_whole

    recorded = onnx_entry(folder, spec(kind).onnx_task or "") / VERDICT_FILE
    if (verdict := recorded_verdict(folder, kind)) is not None:
        return verdict, {}
    loaded: dict[str, TokenModel] = {}
    rows = parity_rows(folder, cfg, kind)
    try:
        loaded["onnx"] = model_class(folder, _on(cfg, "onnx"), kind)
        candidate = stacked(loaded["onnx"].forward(rows))
    except Exception as exc:  # any failure of the export, its session or its inputs: torch serves it
        loaded.clear()
        why = exc.message if isinstance(exc, ModelLoadError) else f"{type(exc).__name__}: {exc}"
        verdict = Verdict(False, f"ONNX Runtime cannot run it: {why}", ran=False)
    else:
        loaded["torch"] = model_class(folder, _on(cfg, "torch"), kind)
        verdict = compare(candidate, stacked(loaded["torch"].forward(rows)), spec(kind).output == "scores")
    try:
        write_whole(recorded, json.dumps(asdict(verdict)))
    except OSError as exc:  # a read-only cache: the verdict holds for this start only
        logger.warning("cannot record the ONNX parity verdict in %s: %s", recorded, exc)
    return verdict, loaded


def recorded_verdict(folder: Path, kind: Kind) -> Verdict | None:
    """The export's parity verdict as its cache entry records it; None before one is taken."""
    from models.inference.onnx_export import onnx_entry

    recorded = onnx_entry(folder, spec(kind).onnx_task or "") / VERDICT_FILE
    return Verdict(**json.loads(recorded.read_text())) if recorded.is_file() else None


def parity_rows(folder: Path, cfg: ModelConfig, kind: Kind) -> list[TokenizedText]:
    """Fixed texts as the gateway would tokenize them, of every length up to the model's limit: the first
    ones as they are, the last all of them joined (truncated to the limit). Pairs for a pair scorer."""
    from models.preprocessing.text_tokenizer import TextTokenizer

    tokenizer = TextTokenizer(folder, cfg, kind)
    texts = [*CALIBRATION_TEXTS[: PARITY_TEXTS - 1], " ".join(CALIBRATION_TEXTS)]
    if spec(kind).output != "scores":
        return TokenizedText.rows(cfg.served_model_name, tokenizer.encode_texts(texts))
    seconds: list[str | None] = list(reversed(texts)) if spec(kind).scores_pairs else [None] * len(texts)
    ids, segments = tokenizer.encode_pair_list(texts, seconds)
    return TokenizedText.rows(cfg.served_model_name, ids, segments)


def stacked(outputs: Sequence[np.ndarray]) -> np.ndarray:
    """A pass's outputs as one (vectors, features) array: a vector per row, or a multi-vector model's per token."""
    return np.concatenate([np.atleast_2d(output) for output in outputs])


def compare(candidate: np.ndarray, reference: np.ndarray, scores: bool) -> Verdict:
    """Vectors by cosine, row by row; scores by their error relative to torch's (absolute below 1)."""
    candidate, reference = candidate.astype(np.float64), reference.astype(np.float64)
    if candidate.shape != reference.shape:
        return Verdict(False, f"shape {candidate.shape} against torch's {reference.shape}")
    if scores:
        error = float((np.abs(candidate - reference) / np.maximum(np.abs(reference), 1.0)).max())
        return Verdict(error <= MAX_RELATIVE_ERROR, f"largest relative error {error:.1e} on {len(reference)} inputs")
    norms = np.linalg.norm(candidate, axis=-1) * np.linalg.norm(reference, axis=-1)
    cosine = float(((candidate * reference).sum(axis=-1) / np.maximum(norms, 1e-30)).min())
    return Verdict(cosine >= MIN_COSINE, f"min cosine {cosine:.7f} on {len(reference)} inputs")


def _on(cfg: ModelConfig, backend: str) -> ModelConfig:
    return cfg.model_copy(update={"backend": backend})


def _chosen(model: TokenModel, reason: str) -> TokenModel:
    logger.info("model '%s' runs on %s", model.info.served_model_name, reason)
    model.info = replace(model.info, backend_reason=reason)
    return model


def load_model(folder: Path, cfg: ModelConfig) -> TokenModel:
    """The checkpoint in `folder` in the class that runs its kind (`KindSpec.loader`): model-service side."""
    check_saved_versions(folder, cfg.model_id)
    kind = model_kind(cfg)
    check_task_adapters(folder, cfg, kind)
    if (model := load_torch_free(folder, cfg, kind)) is not None:
        return model
    torch_threads()  # the thread count set for this thread, now that torch is needed
    if cfg.backend == "auto":
        return load_auto(model_class(kind), folder, cfg, kind)
    return model_class(kind)(folder, cfg, kind)


def load_torch_free(folder: Path, cfg: ModelConfig, kind: Kind) -> TokenModel | None:
    """The model on ONNX Runtime in its kind's torch-free class (`KindSpec.torch_free_loader`) where that runs
    it: on the CPU; for `auto`, its export made and its parity verdict recorded and matching (taking the verdict
    needs the torch-backed class, which a first start loads and the next one skips); its modules ones that class
    runs. With `backend: onnx` a first start exports here, with torch and transformers' model class but without
    sentence-transformers (`models.inference.onnx_export`). None otherwise: its torch-backed class loads it."""
    from models.inference.onnx_export import EXPORTED, onnx_entry
    from models.inference.sentence_head import TorchNeeded

    torch_free = torch_free_class(kind)
    if torch_free is None or cfg.backend not in ("onnx", "auto") or not on_cpu_without_torch(cfg.device):
        return None
    reason = "configured"
    if cfg.backend == "auto":
        exported = (onnx_entry(folder, spec(kind).onnx_task or "") / EXPORTED).is_file() or (
            folder / EXPORTED
        ).is_file()
        verdict = None if not exported or onnx_unfit(folder, cfg, kind) else recorded_verdict(folder, kind)
        if verdict is None or not verdict.matches:
            return None
        reason = verdict.reason
    try:
        model: TokenModel = torch_free(folder, _on(cfg, "onnx"), kind)
    except TorchNeeded as exc:
        logger.info("model '%s' loads with torch: %s", cfg.served_model_name, exc)
        return None
    return _chosen(model, reason) if cfg.backend == "auto" else model
