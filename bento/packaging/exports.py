"""ONNX exports a Bento carries, so that its container starts without exporting or comparing with torch.

A model service declares, beside its store models, one `CarriedExport` per model that may run on ONNX
Runtime (`backend: onnx`, or `auto` where its kind has an export): a store model named after the served model,
versioned by the export's cache key (`models.inference.onnx_export.ExportKey`). A build (`embento build` or a plain
`bentoml build`: both ask each declared model for its info) makes it when the store lacks it: exporting,
checking parity with torch for `auto`, and copying the export and its verdict into the store. The Bento pins
it, and its model service adopts it as its cache entry at start (`adopt_carried_export`). Served from source,
nothing is made ahead: the model service exports into its cache on first start, as before.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import attrs
import bentoml
from bentoml.models import BentoModel

from bento.packaging.store import readable_by_all, store_name
from config.settings import ModelConfig
from models.inference.onnx_export import adopt_export, export_files, export_key, exported_checkpoint, onnx_entry
from models.kinds import model_kind, spec
from models.resolve import resolve_model

logger = logging.getLogger(__name__)
T = TypeVar("T", bound=type)
LABELS = {"source": "embento", "kind": "onnx-export"}


@attrs.frozen
class CarriedExport(BentoModel):
    """A store model a build makes when it asks for its info; serving from source does without it."""

    make: Callable[[], None] = attrs.field(default=None, eq=False, repr=False)

    def to_info(self, alias: str | None = None) -> Any:
        if self.stored is None:
            self.make()
        return super().to_info(alias)

    def resolve(self, base_path: Any = None, global_model_store: Any = None) -> Any:
        return self.stored  # None until a build made it: the model service then exports itself


def carried_tag(cfg: ModelConfig) -> str | None:
    """`onnx-<served name>:<export key digest>` for a model that may run on ONNX Runtime; None otherwise."""
    from models.inference.auto_backend import onnx_unfit  # numpy and the kind registry, no torch

    if cfg.backend not in ("auto", "onnx") or (cfg.backend == "auto" and _for_gpus()):
        return None
    folder = resolve_model(cfg.model_id, cfg.revision)
    kind = model_kind(cfg)
    task = spec(kind).onnx_task
    if task is None or (cfg.backend == "auto" and onnx_unfit(folder, cfg, kind) is not None):
        return None
    return f"onnx-{store_name(cfg.served_model_name)}:{export_key(folder, task).digest}"


def _for_gpus() -> bool:
    """A Bento built for CUDA (`--arg accel=cuda`): `auto` serves torch there, so it carries no export."""
    from bento.packaging.container_image import ARGS

    return ARGS.accel == "cuda"


def carry_exports(configs: Iterable[ModelConfig]) -> Callable[[T], T]:
    """Class decorator for a model service: declare the exports of its models, for a build to make and pin."""
    exports = [(cfg, tag) for cfg in configs if (tag := carried_tag(cfg)) is not None]

    def declare(cls: T) -> T:
        for index, (cfg, tag) in enumerate(exports):
            carried = CarriedExport(tag, make=partial(make_export, cfg, tag))
            setattr(cls, f"onnx_export_{index}", carried)
        return cls

    return declare


def make_export(cfg: ModelConfig, tag: str) -> None:
    """Export (and for `auto`, compare with torch) now, and copy the result into the store under `tag`."""
    from models.inference.auto_backend import check_export

    folder = resolve_model(cfg.model_id, cfg.revision)
    kind = model_kind(cfg)
    task = spec(kind).onnx_task or ""
    if cfg.backend == "auto":
        verdict = check_export(folder, cfg, kind)
        logger.info("'%s' on ONNX Runtime: %s (%s)", cfg.served_model_name, verdict.matches, verdict.detail)
    else:
        exported_checkpoint(folder, task)
    entry = onnx_entry(folder, task)
    with bentoml.models.create(tag, labels=LABELS, metadata={"model_id": cfg.model_id, "task": task}) as model:
        for path in export_files(entry):
            target = Path(model.path) / path.relative_to(entry)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)  # the file, not a link into this machine's cache
        readable_by_all(Path(model.path))


def adopt_carried_export(cfg: ModelConfig, folder: Path) -> None:
    """At a model service's start: the export the Bento carries for this model, if any, as its cache entry."""
    tag = carried_tag(cfg)
    if tag is None:
        return
    try:
        carried = bentoml.models.get(tag)
    except bentoml.exceptions.NotFound:
        return
    entry = adopt_export(Path(carried.path), folder, spec(model_kind(cfg)).onnx_task or "")
    logger.info("'%s': the ONNX export carried as %s, as %s", cfg.served_model_name, tag, entry)
