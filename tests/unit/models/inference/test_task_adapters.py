"""Task adapters on the model side: each task's vectors equal the reference's (`tests.adapter_reference`: the
adapter merged into the base by peft), and rows of different tasks in one batch get the vectors they get alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.adapters import check_task_adapters, find_tasks, named_tasks, served_task, task_for_input_type
from models.base import TokenizedText
from models.inference.text_encoder import TextEncoder
from models.preprocessing.text_tokenizer import TextTokenizer
from testkit.adapters import ADAPTER_TASKS, V5_PROMPTS
from testkit.sentences import make_sentences
from tests.adapter_reference import adapter_vectors
from tests.tolerance import assert_same_vectors, cosines

TEXTS = make_sentences()[:6]


@pytest.fixture(scope="module")
def loaded(task_adapter_path: Path) -> tuple[TextTokenizer, TextEncoder]:
    cfg = ModelConfig(backend="torch", model_id=str(task_adapter_path), device="cpu")
    return TextTokenizer(task_adapter_path, cfg), TextEncoder(task_adapter_path, cfg)


def reference(folder: Path, task: str | None, prompt: str) -> np.ndarray:
    return adapter_vectors(folder, task, TEXTS, prompt)


def rows(tokenizer: TextTokenizer, task: str | None, prompt: str = "") -> list[TokenizedText]:
    return TokenizedText.rows("m", tokenizer.encode_texts(TEXTS, prompt), task=task)


@pytest.mark.parametrize(("task", "prompt"), [(ADAPTER_TASKS[0], V5_PROMPTS["query"]), (ADAPTER_TASKS[1], "")])
def test_each_task_matches_its_merged_adapter(loaded, task_adapter_path, task, prompt):
    tokenizer, encoder = loaded
    assert encoder.info.tasks == list(ADAPTER_TASKS)
    assert_same_vectors(encoder.forward(rows(tokenizer, task, prompt)), reference(task_adapter_path, task, prompt))


def test_tasks_give_different_vectors_and_no_task_is_the_base(loaded, task_adapter_path):
    tokenizer, encoder = loaded
    first, second = (np.asarray(encoder.forward(rows(tokenizer, task))) for task in ADAPTER_TASKS)
    assert cosines(first, second).max() < 0.99  # the adapters are not no-ops
    assert_same_vectors(encoder.forward(rows(tokenizer, None)), reference(task_adapter_path, None, ""))


def test_a_mixed_batch_gives_each_row_its_single_task_vector(loaded):
    tokenizer, encoder = loaded
    alone = {task: np.asarray(encoder.forward(rows(tokenizer, task))) for task in (*ADAPTER_TASKS, None)}
    tasks = [ADAPTER_TASKS[0], None, ADAPTER_TASKS[1], ADAPTER_TASKS[1], ADAPTER_TASKS[0], None]
    mixed = [row.model_copy(update={"task": task}) for row, task in zip(rows(tokenizer, None), tasks)]
    got = np.asarray(encoder.forward(mixed))
    expected = np.stack([alone[task][index] for index, task in enumerate(tasks)])
    assert cosines(got, expected).min() >= 0.9999


def test_an_unknown_task_fails_its_rows(loaded):
    tokenizer, encoder = loaded
    with pytest.raises(KeyError, match="no task adapter 'nope'"):
        encoder.forward(rows(tokenizer, "nope"))


def test_input_types_and_role_names_map_as_jina_cards_do():
    tasks = ["classification", "clustering", "retrieval", "text-matching"]  # v5's adapters
    assert task_for_input_type(tasks, "search_query") == "retrieval"
    assert task_for_input_type(tasks, "clustering") == "clustering"
    assert task_for_input_type(["retrieval.query", "separation"], "clustering") == "separation"  # v3's names
    assert task_for_input_type(["text-matching"], "search_document") is None
    assert served_task(tasks, "retrieval.passage") == ("retrieval", "search_document")
    assert served_task(tasks, "retrieval") == ("retrieval", None)
    assert served_task(["text-matching"], "retrieval.query") is None
    assert named_tasks(["retrieval"]) == ["retrieval", "retrieval.query", "retrieval.passage"]


def test_adapter_like_folders_that_do_not_fit_are_refused(task_adapter_path, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(task_adapter_path, folder)
    assert sorted(find_tasks(folder)) == list(ADAPTER_TASKS)
    cfg = ModelConfig(backend="onnx", model_id=str(folder))
    with pytest.raises(ModelLoadError, match="run on torch only"):
        check_task_adapters(folder, cfg, "embed")
    with pytest.raises(ModelLoadError, match="a rerank model takes none"):
        check_task_adapters(folder, cfg, "rerank")
    (folder / "adapters" / "text-matching" / "adapter_model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="lacks \\['adapter_model.safetensors'\\]"):
        find_tasks(folder)
    shutil.rmtree(folder / "adapters" / "text-matching")
    config_path = folder / "adapters" / "retrieval" / "adapter_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "peft_type": "IA3"}))
    with pytest.raises(ModelLoadError, match="LoRA only"):
        find_tasks(folder)


def test_jina_v3_remote_code_lora_is_refused_with_its_reason(task_adapter_path, tmp_path):
    folder = tmp_path / "v3-like"
    shutil.copytree(task_adapter_path, folder, ignore=shutil.ignore_patterns("adapters"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "lora_adaptations": ["retrieval.query"]}))
    with pytest.raises(ModelLoadError, match="not peft adapters"):
        find_tasks(folder)


def test_a_folder_without_adapters_has_no_tasks(tmp_path):
    assert find_tasks(tmp_path) == {}
