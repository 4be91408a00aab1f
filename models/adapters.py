"""Task adapters: one base embedder and a peft LoRA adapter per task, chosen per request (`task`).

The layout accepted is peft's own, beside a base checkpoint (a sentence-transformers folder, or a plain
transformers one): `adapters/<task>/adapter_config.json` and `adapters/<task>/adapter_model.safetensors`, each
folder as peft's `save_pretrained` writes it, its name the task's. jina-embeddings-v5-text's base repositories
are described as shipping their four adapters (`retrieval`, `text-matching`, `clustering`, `classification`) so
(not verified here: the Hub is out of reach). Anything adapter-like that does not fit is refused with its reason:
a task folder without those two files, an adapter other than LoRA, and jina-embeddings-v3's remote-code LoRA
(`lora_adaptations` in `config.json`: its weights live inside the checkpoint under its own parametrization,
not as peft adapters).

Cohere's and Voyage's `input_type` name a task as Jina's cards map them (`INPUT_TYPE_TASKS`): the first of its
candidates the checkpoint has. Jina's `retrieval.query` / `retrieval.passage` name a `retrieval` adapter with
the query or document prompt where the checkpoint has no adapter of that name (`ROLE_TASKS`, v5's scheme).
Imports no torch: the gateway reads the tasks too.
"""

from __future__ import annotations

import json
from pathlib import Path

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.kinds import Kind, spec
from models.resolve import read_json

ADAPTERS_FOLDER = "adapters"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# Cohere's input types (Voyage's query and document arrive as search_query and search_document), each to the
# tasks that serve it in Jina's cards: v3's names first, then v5's.
INPUT_TYPE_TASKS: dict[str, tuple[str, ...]] = {
    "search_query": ("retrieval.query", "retrieval"),
    "search_document": ("retrieval.passage", "retrieval"),
    "classification": ("classification",),
    "clustering": ("separation", "clustering"),
}
# Jina API's role-named retrieval tasks, for a checkpoint with one `retrieval` adapter and query/document
# prompts (v5): the adapter, and the input type whose prompt frames the text.
ROLE_TASKS: dict[str, tuple[str, str]] = {
    "retrieval.query": ("retrieval", "search_query"),
    "retrieval.passage": ("retrieval", "search_document"),
}


def find_tasks(folder: Path) -> dict[str, Path]:
    """Each task's adapter folder, by task name, sorted; {} for a checkpoint without adapters."""
    if "lora_adaptations" in read_json(folder / "config.json"):
        raise ModelLoadError(
            f"'{folder}' carries remote-code LoRA adaptations (jina-embeddings-v3's `lora_adaptations`), which are "
            f"not peft adapters; Embento serves task adapters as peft LoRA folders: "
            f"{ADAPTERS_FOLDER}/<task>/{{{', '.join(ADAPTER_FILES)}}}"
        )
    root = folder / ADAPTERS_FOLDER
    if not root.is_dir():
        return {}
    tasks = {path.name: path for path in sorted(root.iterdir()) if path.is_dir()}
    for task, path in tasks.items():
        _check_adapter(task, path)
    return tasks


def served_task(tasks: list[str], task: str) -> tuple[str, str | None] | None:
    """The adapter a requested task runs on and the input type it implies (Jina's role-named retrieval tasks);
    None for a task the model does not have."""
    if task in tasks:
        return task, None
    adapter, input_type = ROLE_TASKS.get(task, ("", ""))
    return (adapter, input_type) if adapter in tasks else None


def named_tasks(tasks: list[str]) -> list[str]:
    """What a request's `task` may name: the adapters, and the role-named retrieval tasks they serve."""
    return tasks + [name for name, (adapter, _) in ROLE_TASKS.items() if adapter in tasks and name not in tasks]


def task_for_input_type(tasks: list[str], input_type: str | None) -> str | None:
    """The task Cohere's (or Voyage's) input type names for a checkpoint with these adapters, if any."""
    return next((task for task in INPUT_TYPE_TASKS.get(input_type or "", ()) if task in tasks), None)


def _check_adapter(task: str, path: Path) -> None:
    missing = [name for name in ADAPTER_FILES if not (path / name).is_file()]
    if missing:
        raise ModelLoadError(
            f"task adapter '{task}' ({path}) lacks {missing}; each {ADAPTERS_FOLDER}/<task> folder must hold "
            f"{list(ADAPTER_FILES)} as peft's save_pretrained writes them"
        )
    try:
        config = json.loads((path / ADAPTER_FILES[0]).read_text())
    except ValueError as exc:
        raise ModelLoadError(f"task adapter '{task}': {path / ADAPTER_FILES[0]} is not JSON ({exc})") from None
    if config.get("peft_type") != "LORA":
        raise ModelLoadError(
            f"task adapter '{task}' is a {config.get('peft_type')!r} adapter; task adapters are served as LoRA only"
        )


def check_task_adapters(folder: Path, cfg: ModelConfig, kind: Kind) -> dict[str, Path]:
    """The checkpoint's task adapters where its kind and backend can run them; refused otherwise."""
    tasks = find_tasks(folder)
    if tasks and not spec(kind).takes_tasks:
        raise ModelLoadError(f"'{cfg.model_id}' carries task adapters {sorted(tasks)}; a {kind} model takes none")
    if tasks and cfg.backend not in ("auto", "torch"):
        raise ModelLoadError(
            f"'{cfg.model_id}' carries task adapters {sorted(tasks)}, which run on torch only; "
            f"backend '{cfg.backend}' cannot run them (use backend torch or auto)"
        )
    return tasks
