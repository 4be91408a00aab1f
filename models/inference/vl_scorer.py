"""Vision-language rerankers on the torch backend (model-service side): Qwen3-VL-Reranker, one logit per (query,
document) pair, as its sentence-transformers CrossEncoder computes it: the conditional-generation model's logits
at the last position (`logits_to_keep=1`, the sequence padded on the left as its Transformer module enforces),
the true token's minus the false token's (`LogitScore`). The activation is applied per request
(`models.scores.activate`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.base import Kind, ModelInfo, ModelInput
from models.inference.text_scorer import ACTIVATIONS
from models.inference.vl_encoder import load_vision_language, vl_batch
from models.preprocessing.vl_processor import VisionLanguageProcessor
from models.resolve import read_json


class VisionLanguageScorer:
    """The `TokenModel` of `vl-rerank` checkpoints."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind) -> None:
        from transformers import AutoModelForMultimodalLM

        self.processor = VisionLanguageProcessor(folder, cfg, kind)
        self._true_id, self._false_id = logit_score_tokens(folder, cfg.model_id)
        # sentence-transformers' any-to-any Transformer module loads it so: the VLM with its LM head
        self._model, self._device, self._dtype = load_vision_language(AutoModelForMultimodalLM, folder, cfg)
        self.forward(self.processor.warmup_rows(cfg.served_model_name)[:1])
        self.info = ModelInfo.of(
            cfg,
            kind,
            modalities=list(self.processor.modalities),
            dimension=1,
            max_input_tokens=self.processor.max_input_tokens,
            normalized=False,
            device=str(self._device),
            dtype=str(self._dtype).removeprefix("torch."),
            labels=["score"],
            activation=_activation(folder, cfg.model_id),
            scorer="causal-lm",
        )

    def forward(self, rows: Sequence[ModelInput]) -> list[np.ndarray]:
        import torch

        batch = vl_batch(rows, self.processor.pad_id, True, self._device, self._dtype)
        with torch.inference_mode():
            logits = self._model(**batch, logits_to_keep=1).logits[:, -1].float()
            scores = logits[:, self._true_id]
            if self._false_id is not None:
                scores = scores - logits[:, self._false_id]
        return list(scores.reshape(-1, 1).cpu().numpy())


def logit_score_tokens(folder: Path, model_id: str) -> tuple[int, int | None]:
    """The true and false token ids of the folder's `LogitScore` module (`modules.json` says where it is)."""
    modules = json.loads((folder / "modules.json").read_text())
    module = next((m for m in modules if str(m.get("type", "")).endswith(".LogitScore")), None)
    if module is None:
        raise ModelLoadError(f"'{model_id}' has no LogitScore module to score its pairs with")
    settings = read_json(folder / module["path"] / "config.json")
    if settings.get("true_token_id") is None:
        raise ModelLoadError(f"the LogitScore module of '{model_id}' names no true_token_id")
    false_id = settings.get("false_token_id")
    return int(settings["true_token_id"]), None if false_id is None else int(false_id)


def _activation(folder: Path, model_id: str) -> str:
    """The CrossEncoder's activation (`activation_fn` in its configuration), sigmoid unless it names another."""
    path = read_json(folder / "config_sentence_transformers.json").get("activation_fn")
    name = "Sigmoid" if path is None else str(path).rpartition(".")[2]
    if name not in ACTIVATIONS:
        raise ModelLoadError(f"'{model_id}' declares the activation {name}; supported: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]
