"""Whether a checkpoint is a text model that transformers builds by itself: what makes `detect_kind` serve a
folder as a text embedder, rather than every folder it does not recognise (a vision-language model served as
text, a remote-code model loaded as the plain architecture its code extends).

Read without importing transformers, as the gateway decides kinds before it chooses to run without torch:
transformers' own tables of model types, processors and model classes, read from its source files.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from config.errors import ModelLoadError
from models.resolve import read_json

# The files a media processor is saved in (transformers' processor, image, feature-extractor and video
# processor classes); a text model has a tokenizer only.
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "video_preprocessor_config.json")
# Sub-configurations of a model whose towers read media (`Qwen3VLConfig.vision_config`, `..audio_config`).
MEDIA_WORDS = ("vision", "visual", "image", "video", "audio", "speech")
# sentence-transformers' modality names that are text: plain strings, and chat messages (which a text
# model's chat template frames); others ("image", "audio", "video", "image+text") are media.
TEXT_MODALITIES = frozenset({"text", "message"})
# The packages whose sentence-transformers modules are library code (PyLate's extend sentence-transformers').
LIBRARY_MODULE_PACKAGES = frozenset({"sentence_transformers", "pylate"})


def why_not_text(folder: Path, config: dict[str, Any]) -> str | None:
    """Why this checkpoint is not a text model transformers builds natively, in words naming what was found;
    None when it is one. Its code must be library code: sentence-transformers modules, and a model_type and
    architectures transformers has. Then the modalities sentence-transformers 6 saved for its Transformer
    module decide; a folder without them (saved by an older version, or by transformers alone) is text when
    its config.json has no media tower and transformers gives its model_type no media processor."""
    if not (folder / "config.json").is_file():
        return "it holds no config.json"
    if reason := _own_module_reason(folder) or _remote_code_reason(config):
        return reason
    declared = _declared_modalities(folder)
    if declared is None:
        return _media_reason(folder, config)
    if media := sorted(declared - TEXT_MODALITIES):
        return f"its sentence-transformers Transformer module takes {', '.join(media)}"
    return None


def _modules(folder: Path) -> list[dict[str, Any]]:
    modules: Any = read_json(folder / "modules.json")  # a JSON list, where read_json expects objects
    return list(modules) if isinstance(modules, list) else []


def _own_module_reason(folder: Path) -> str | None:
    for module in _modules(folder):
        module_type = str(module.get("type", ""))
        if module_type.split(".")[0] not in LIBRARY_MODULE_PACKAGES:
            return f"its sentence-transformers module '{module_type}' is the checkpoint's own code"
    return None


def _declared_modalities(folder: Path) -> set[str] | None:
    """The modalities in the `modality_config` sentence-transformers 6 saves for the Transformer module it
    inferred them for ("image+text" is two); None when no module declares any."""
    declared: set[str] | None = None
    for module in _modules(folder):
        settings = read_json(folder / str(module.get("path", "")) / "sentence_bert_config.json")
        if "modality_config" in settings:
            declared = (declared or set()) | {
                part for modality in settings["modality_config"] for part in modality.split("+")
            }
    return declared


def _remote_code_reason(config: dict[str, Any]) -> str | None:
    """A model_type or a model class transformers lacks: its `architectures`, and the classes `auto_map`
    names for the AutoModel loaders (where one is the checkpoint's own class, its weights are laid out for
    that class even when its model_type is one transformers knows: jina-embeddings-v3's is `xlm-roberta`)."""
    model_type = config.get("model_type")
    auto_map = config.get("auto_map") or {}
    remote = " (its own code, auto_map, is what builds it)" if auto_map else ""
    if not model_type:
        return f"its config.json names no model_type{remote}"
    if model_type not in _config_types():
        return f"model_type '{model_type}' is not one transformers {version('transformers')} has{remote}"
    own = [ref.split(".")[-1] for key, ref in auto_map.items() if key.startswith("AutoModel") and isinstance(ref, str)]
    unknown = [name for name in [*(config.get("architectures") or []), *own] if name not in _transformers_names()]
    if unknown:
        return f"its model class {unknown[0]} is not one transformers {version('transformers')} has{remote}"
    return None


def _media_reason(folder: Path, config: dict[str, Any]) -> str | None:
    model_type = config["model_type"]
    towers = [key for key, value in config.items() if isinstance(value, dict) and _names_media(key)]
    if towers:
        return f"model_type '{model_type}' has {', '.join(towers)}"
    if model_type in _media_processor_types():
        return f"model_type '{model_type}' takes its inputs through a media processor in transformers"
    if saved := [name for name in PROCESSOR_FILES if (folder / name).is_file()]:
        return f"it holds a media processor ({saved[0]})"
    return None


def _names_media(key: str) -> bool:
    return key.endswith("_config") and any(word in key for word in MEDIA_WORDS)


@cache
def _config_types() -> frozenset[str]:
    return frozenset(entry[0] for entry in _auto_tables("auto_mappings")["CONFIG_MAPPING_NAMES"])


@cache
def _media_processor_types() -> frozenset[str]:
    tables = _auto_tables("auto_mappings")
    names = ("PROCESSOR", "IMAGE_PROCESSOR", "FEATURE_EXTRACTOR", "VIDEO_PROCESSOR")
    return frozenset(entry[0] for name in names for entry in tables[f"{name}_MAPPING_NAMES"])


@cache
def _transformers_names() -> frozenset[str]:
    """The model classes transformers' Auto classes build (its `MODEL_*_MAPPING_NAMES` tables)."""
    return frozenset(
        name
        for table in _auto_tables("modeling_auto").values()
        for entry in table
        for name in ([entry[1]] if isinstance(entry[1], str) else entry[1])
    )


@cache
def _auto_tables(module: str) -> dict[str, list[tuple[Any, ...]]]:
    """The `*_NAMES` tables of one of transformers' auto modules (model_type -> class names, written as literals),
    read from its source: importing transformers here would, in the gateway, make transformers count on torch
    before the gateway decides to run without it (`gateway.http.assembly`, before its preprocessors load)."""
    spec = importlib.util.find_spec("transformers")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("transformers is not installed")
    source = Path(spec.submodule_search_locations[0]) / "models" / "auto" / f"{module}.py"
    tables = {}
    for node in ast.parse(source.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(target := node.targets[0], ast.Name)
            and target.id.endswith("_MAPPING_NAMES")
            and isinstance(node.value, ast.Call)
            and node.value.args
        ):
            with contextlib.suppress(ValueError):  # a table built from others (`*OTHER_TABLE`) adds no name
                tables[target.id] = ast.literal_eval(node.value.args[0])
    if not tables:
        raise ModelLoadError(f"{source} holds no model tables: a transformers version this Embento does not know")
    return tables
