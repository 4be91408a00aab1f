"""A tiny embedder with task adapters, laid out as jina-embeddings-v5-text's base repository: a
sentence-transformers folder (mean pooling, unit vectors, v5's `Query: ` / `Document: ` prompts) and one peft
LoRA adapter per task under `adapters/<task>`, each made by peft's `get_peft_model` and saved by its
`save_pretrained`. LoRA's B weights start at zero, which makes an adapter a no-op: here both A and B are drawn
(`init_lora_weights=False`), so each task's vectors differ from the base's and from each other's."""

from __future__ import annotations

import shutil
from pathlib import Path

from models.adapters import ADAPTERS_FOLDER
from testkit.checkpoints import _sentence_transformer_folder, build_tiny_bert

ADAPTER_TASKS = ("retrieval", "text-matching")
V5_PROMPTS = {"query": "Query: ", "document": "Document: "}


def build_task_adapter_embedder(folder: Path, minilm: Path, tasks: tuple[str, ...] = ADAPTER_TASKS) -> Path:
    """The base embedder at `folder/base`, with an adapter per task in its `adapters/` folder."""
    build_tiny_bert(folder / "bert", minilm, seed=53, initializer_range=0.2)
    base = _sentence_transformer_folder(folder / "bert", folder / "base", 64, "mean", V5_PROMPTS)
    for seed, task in enumerate(tasks, start=101):
        save_lora_adapter(base, base / ADAPTERS_FOLDER / task, seed)
    return base


def with_task_adapters(source: Path, folder: Path, tasks: tuple[str, ...]) -> Path:
    """A copy of the embedder at `source` in `folder`, with a drawn LoRA adapter per task (bench/task_adapters.py
    gives all-MiniLM-L6-v2 v5's four)."""
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns(ADAPTERS_FOLDER))
    for seed, task in enumerate(tasks, start=101):
        save_lora_adapter(folder, folder / ADAPTERS_FOLDER / task, seed)
    return folder


def save_lora_adapter(base: Path, target: Path, seed: int) -> Path:
    """A LoRA adapter of the base's transformer (attention query and value, rank 4), drawn from `seed`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    torch.manual_seed(seed)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], init_lora_weights=False)
    get_peft_model(AutoModel.from_pretrained(str(base)), config).save_pretrained(str(target))
    return target
