"""A checkpoint saved by a newer major of transformers or sentence-transformers than the one installed is
refused at start. A new major renames or moves settings (transformers 5 moved `rope_theta` into
`rope_parameters`, which 4.x does not read and silently replaces by its default): loading such a checkpoint
serves plausible, wrong vectors. The versions are the ones the libraries record when they save.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from config.errors import ModelLoadError
from models.resolve import read_json


def check_saved_versions(folder: Path, model_id: str) -> None:
    """Raises when a library that saved the checkpoint is of a newer major than the installed one."""
    sentence_config = read_json(folder / "config_sentence_transformers.json").get("__version__") or {}
    saved = {
        "transformers": read_json(folder / "config.json").get("transformers_version"),
        "sentence-transformers": sentence_config.get("sentence_transformers"),
    }
    for package, written in saved.items():
        installed = version(package)
        if isinstance(written, str) and _major(written) > _major(installed):
            raise ModelLoadError(
                f"'{model_id}' was saved by {package} {written}, a newer major than the installed {installed}: "
                f"its settings could be read wrong, so it is not served (upgrade Embento's pinned stack)"
            )


def _major(text: str) -> int:
    head = text.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else 0
