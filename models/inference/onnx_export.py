"""A checkpoint exported to ONNX once, into a cache entry named by everything the exported graph depends on.

The export is torch's own (`torch.onnx.export` with its dynamo exporter): the transformers model of the
export task, taking the batch tensors the model service pads (`input_ids`, `attention_mask` and, where the
tokenizer gives them, `token_type_ids`) and giving its token states or logits. The legacy TorchScript exporter
traced transformers 5's attention masks at the sample's length (min cosine 0.85 on all-MiniLM-L6-v2 at other
lengths), and optimum-onnx, which wrapped it, caps transformers below 4.58. The entry holds `onnx/model.onnx`
(sentence-transformers loads the checkpoint itself, from its own folder). A checkpoint that ships
`onnx/model.onnx` is used as it is, linked into the entry (the parity gate of `backend: auto` still judges
it). An export made elsewhere (a Bento carries one from its build) is adopted, not made again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from config.errors import ModelLoadError, one_line
from config.settings import get_config

logger = logging.getLogger(__name__)
EXPORTED = "onnx/model.onnx"
KEY_FILE = "export-key.json"
# The graph optimizations ONNX Runtime applies when it opens a session (`onnx_runtime.session_options`); every
# level was measured at the same speed and the same outputs on all-MiniLM-L6-v2 (853238e:bench/onnx_cpu.py), so the
# export is kept unoptimized and the level only names the entry its parity verdict was taken at.
OPTIMIZATION = "all"
# Checkpoint files this large are sampled, not read whole, for the revision digest (a 2 GB model would take
# seconds per start): their size, first and last MiB and evenly spaced blocks between.
SAMPLED_FILE_BYTES = 8 << 20
SAMPLE_BYTES = 1 << 20
SAMPLE_BLOCKS = 16


@dataclass(frozen=True)
class ExportKey:
    """Everything an exported graph and its parity verdict depend on; a change of any part is a new entry."""

    revision: str  # the checkpoint's content (`checkpoint_revision`)
    task: str  # "feature-extraction" (token states) or "sequence-classification" (logits)
    transformers: str  # the modeling code the graph is exported from
    onnxruntime: str
    torch: str  # the exporter, and the reference the parity verdict compares with
    onnxscript: str  # the dynamo exporter's ONNX builder and graph optimizer
    optimization: str = OPTIMIZATION

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:20]


def export_key(folder: Path, task: str) -> ExportKey:
    return ExportKey(
        checkpoint_revision(folder),
        task,
        _version("transformers"),
        _version("onnxruntime"),
        _version("torch"),
        _version("onnxscript"),
    )


def onnx_entry(folder: Path, task: str) -> Path:
    """The cache entry of this checkpoint's export for `task` (it may not exist yet)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.name)[:40]
    return Path(get_config().cache_dir).expanduser() / "onnx" / f"{name}-{export_key(folder, task).digest}"


def exported_checkpoint(folder: Path, task: str) -> Path:
    """The entry, with the checkpoint's export, exporting at most once."""
    entry = onnx_entry(folder, task)
    _link_shipped_export(folder, entry)
    if not (entry / EXPORTED).is_file():
        _export(folder, task, entry / "onnx")
    key_file = entry / KEY_FILE
    if not key_file.is_file():
        write_whole(key_file, json.dumps(asdict(export_key(folder, task)), indent=1))
    return entry


def write_whole(path: Path, text: str) -> None:
    """`text` as `path`, appearing whole: processes sharing the cache (model services, replicas) may read it now."""
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    draft.write_text(text)
    os.replace(draft, path)


def adopt_export(source: Path, folder: Path, task: str) -> Path:
    """A finished export made elsewhere (by a Bento's build: `source` holds its `onnx/` folder and verdict)
    becomes this checkpoint's entry, its files linked. The caller matched the key."""
    entry = onnx_entry(folder, task)
    if (entry / EXPORTED).is_file():
        return entry
    for path in sorted(source.rglob("*"), key=lambda p: p.as_posix() == EXPORTED):  # model.onnx last
        if path.is_file():
            target = entry / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            _link(target, path)
    return entry


def export_files(entry: Path) -> list[Path]:
    """What an entry holds (the export, its key, its verdict): what a Bento carries."""
    return [path for path in entry.rglob("*") if path.is_file()]


def checkpoint_revision(folder: Path) -> str:
    """The checkpoint's identity: a Hub snapshot's commit, else a digest of its files' names, sizes and
    contents (sampled for large files). Content, not paths or times, so the same checkpoint copied into a
    model store, a container or a pip-installed package names the same entry."""
    folder = folder.resolve()
    if folder.parent.name == "snapshots":
        return f"hub-{folder.name}"
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(folder).as_posix()}\0{size}\0".encode())
        with path.open("rb") as file:
            if size <= SAMPLED_FILE_BYTES:
                digest.update(file.read())
                continue
            step = size // SAMPLE_BLOCKS
            for offset, length in [
                (0, SAMPLE_BYTES),
                *((n * step, 1 << 16) for n in range(1, SAMPLE_BLOCKS)),
                (size - SAMPLE_BYTES, SAMPLE_BYTES),
            ]:
                file.seek(offset)
                digest.update(file.read(length))
    return f"files-{digest.hexdigest()[:24]}"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


def _link_shipped_export(folder: Path, entry: Path) -> None:
    (entry / "onnx").mkdir(parents=True, exist_ok=True)
    shipped = folder / EXPORTED
    if shipped.is_file():
        _link(entry / EXPORTED, shipped)


def _link(link: Path, target: Path) -> None:
    """`link` -> `target` unless it exists: another process starting the same model may have made it."""
    with contextlib.suppress(FileExistsError):
        link.symlink_to(target.resolve())


def _export(folder: Path, task: str, target: Path) -> None:
    logger.info("exporting %s to ONNX (%s), once", folder, task)
    scratch = target.parent / f".export-{os.getpid()}"
    try:
        scratch.mkdir(parents=True, exist_ok=True)
        export_graph(folder, task, scratch / "model.onnx")
        _move_into(scratch, target)
    except Exception as exc:
        raise ModelLoadError(f"cannot export {folder} to ONNX: {one_line(exc)}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def export_graph(folder: Path, task: str, file: Path, attention: str = "eager") -> None:
    """The checkpoint's transformers model for `task` as one ONNX file, batch and sequence axes dynamic.
    Attention is transformers' eager implementation: the SDPA graph ran all-MiniLM-L6-v2 3 % slower on ONNX
    Runtime (853238e:bench/onnx_cpu.py --attention)."""
    import torch

    model = _task_model(folder, task, attention)
    inputs = _sample_inputs(folder)
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with _quiet():
        torch.onnx.export(
            _graph(model, task),
            tuple(inputs.values()),
            str(file),
            input_names=list(inputs),
            output_names=[TASK_OUTPUTS[task]],
            dynamo=True,
            external_data=False,
            verbose=False,
            dynamic_shapes=tuple({0: batch, 1: sequence} for _ in inputs),
        )


# What the graph's one output is: the transformers output a sentence-transformers Transformer module reads.
TASK_OUTPUTS = {"feature-extraction": "last_hidden_state", "sequence-classification": "logits"}


def _task_model(folder: Path, task: str, attention: str) -> Any:  # transformers.PreTrainedModel
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    model_class = {"feature-extraction": AutoModel, "sequence-classification": AutoModelForSequenceClassification}[task]
    return model_class.from_pretrained(
        str(folder), dtype=torch.float32, attn_implementation=attention, local_files_only=True
    ).eval()


def _sample_inputs(folder: Path) -> dict[str, Any]:
    """Two rows of different lengths, as the model service pads them (`models.inference.padding.pad_rows`): the graph's
    inputs are the tensors the tokenizer names, and two distinct sizes keep the exporter from fixing either axis."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    batch = tokenizer(
        ["An exported graph takes any batch of any length.", "Two rows."], padding=True, return_tensors="pt"
    )
    names = ["input_ids", "attention_mask", *(["token_type_ids"] if "token_type_ids" in batch else [])]
    return {name: batch[name].to(torch.int64) for name in names}


def _graph(model: Any, task: str) -> Any:  # torch.nn.Module
    """What is exported: the task model called with the padded tensors, giving its one output."""
    import torch

    output = TASK_OUTPUTS[task]

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            segments = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask, **segments), output)

    return Graph()


@contextlib.contextmanager
def _quiet() -> Any:
    """The exporter's warnings and log lines (it reports each operator it looked for, torchvision's among them)
    off the console while it runs."""
    import warnings

    exporter_logger = logging.getLogger("torch.onnx")
    level = exporter_logger.level
    exporter_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        exporter_logger.setLevel(level)


def _move_into(scratch: Path, target: Path) -> None:
    """The export's files into place; model.onnx last, as it marks the export complete."""
    for entry in sorted(scratch.iterdir(), key=lambda p: p.name == "model.onnx"):
        os.replace(entry, target / entry.name)
