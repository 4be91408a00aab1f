"""Token ids -> logits on ONNX Runtime with numpy alone, for rerankers and classifiers whose checkpoint is a
sequence-classification head: no torch, transformers' model code or sentence-transformers in the process.

The export's graph ends in the head's logits (`onnx_export.TASK_OUTPUTS`), which is all that `TextScorer` takes
from a one-module CrossEncoder on ONNX Runtime: the session's output is served as it is, the activation being
applied per request in the gateway (`models.scores.activate`). What `TextScorer` reads through
sentence-transformers and transformers (the labels, the CrossEncoder's activation, the window) is read here from
the checkpoint's files, by the same rules. A checkpoint those rules do not cover (more modules than the
Transformer, a causal LM, an activation class outside torch) raises `TorchNeeded`: `TextScorer` loads it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.base import Activation, ModelInfo, TokenizedText
from models.inference.backends import check_device
from models.inference.onnx_text import open_session, read_text_settings, tokenizer_files
from models.inference.padding import padded_ids
from models.inference.sentence_head import TorchNeeded
from models.inference.text_scorer import ACTIVATIONS
from models.kinds import Kind, label_count, model_scorer, spec
from models.resolve import read_json


class OnnxTextScorer:
    """The `TokenModel` of cross-encoder rerankers and text classifiers on ONNX Runtime without torch
    (`KindSpec.torch_free_loader`)."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind) -> None:
        check_device(cfg, "cpu")
        scorer = model_scorer(folder, kind)
        if scorer != "cross-encoder":
            raise TorchNeeded(f"a {scorer} scorer runs on torch")
        config = read_json(folder / "config.json")
        _check_one_module(folder, cfg, config)
        labels = _labels(config)
        if spec(kind).scores_pairs and len(labels) != 1:
            raise ModelLoadError(
                f"'{cfg.model_id}' has {len(labels)} output labels; a reranker needs one. Serve it with kind "
                "'classify'."
            )
        self._pad_id, self._pad_left, model_max_length = tokenizer_files(folder)
        settings = read_text_settings(folder, cfg, model_max_length)
        activation = _activation(config, len(labels), spec(kind).scores_pairs, cfg)
        self._session = open_session(folder, cfg, kind)
        self._inputs = [tensor.name for tensor in self._session.get_inputs()]
        self.info = ModelInfo.of(
            cfg,
            kind,
            dimension=len(labels),
            max_input_tokens=settings.max_seq_length,
            normalized=False,
            device="cpu",
            dtype="int8" if cfg.dtype == "int8" else "float32",
            labels=labels,
            activation=activation,
            scorer=scorer,
        )

    def forward(self, rows: Sequence[TokenizedText]) -> np.ndarray:
        batch = padded_ids(rows, self._pad_id, self._pad_left)
        feeds = {name: batch.get(name, np.zeros_like(batch["input_ids"])) for name in self._inputs}
        logits = self._session.run(None, feeds)[0]  # (rows, labels)
        return np.asarray(logits, dtype=np.float32).reshape(len(rows), -1)


def _check_one_module(folder: Path, cfg: ModelConfig, config: dict[str, Any]) -> None:
    """What `text_scorer._load_cross_encoder` checks of the CrossEncoder: a trained sequence-classification head
    (its refusal, word for word), and no module after the Transformer (`TorchNeeded`: the torch class decides)."""
    if not any(name.endswith("ForSequenceClassification") for name in config.get("architectures") or []):
        raise ModelLoadError(f"'{cfg.model_id}' has no trained classification head; it cannot rerank or classify")
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return  # sentence-transformers builds one Transformer module for a plain transformers folder
    modules = json.loads(modules_file.read_text())
    types = [str(module.get("type", "")).rpartition(".")[2] for module in modules]
    if types != ["Transformer"] or modules[0].get("path", "") != "":
        raise TorchNeeded(f"its modules {types} are not one Transformer")
    task = read_json(folder / "sentence_bert_config.json").get("transformer_task", "sequence-classification")
    if task != "sequence-classification":
        raise TorchNeeded(f"its Transformer's task is {task}")


def _labels(config: dict[str, Any]) -> list[str]:
    """Its labels in order as transformers' configuration names them (`LABEL_i` where it names none)."""
    names = {int(key): str(value) for key, value in (config.get("id2label") or {}).items()}
    return [names.get(i, f"LABEL_{i}") for i in range(label_count(config))]


def _activation(config: dict[str, Any], labels: int, scores_pairs: bool, cfg: ModelConfig) -> Activation:
    """`text_scorer._activation` from the files: for pairs, the CrossEncoder's (`get_default_activation_fn`: the
    class its configuration names under `sentence_transformers`, or before v4 `sbert_ce_default_activation_function`,
    where it is torch's; else sigmoid for one label, identity for more); for single texts, the pipeline's."""
    if not scores_pairs:
        multi_label = config.get("problem_type") == "multi_label_classification" or labels == 1
        return "sigmoid" if multi_label else "softmax"
    path = (config.get("sentence_transformers") or {}).get("activation_fn") or config.get(
        "sbert_ce_default_activation_function"
    )
    if path is not None and not str(path).startswith("torch."):
        if cfg.trust_remote_code:
            raise TorchNeeded(f"its activation {path} is imported from its code")
        path = None  # sentence-transformers does not trust it and takes the default
    name = str(path).rpartition(".")[2] if path is not None else ("Sigmoid" if labels == 1 else "Identity")
    if name not in ACTIVATIONS:
        raise ModelLoadError(f"'{cfg.model_id}' declares the activation {name}; supported: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]
