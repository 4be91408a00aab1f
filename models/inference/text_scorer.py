"""Token ids -> logits, through the checkpoint's sentence-transformers CrossEncoder.

One class serves rerankers (a one-label head over a (query, document) pair, or a causal LM whose logits at
the last position score it, as `LogitScore` defines) and classifiers (a head with one logit per label over a
single text). The model service returns logits; activations are applied per request (`models.scores.activate`),
so `raw_scores` costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.errors import ConfigError, ModelLoadError
from config.settings import ModelConfig
from models.base import Activation, Kind, ModelInfo, PendingOutputs, TokenizedText
from models.inference.padding import pad_rows
from models.kinds import model_scorer, spec
from models.llm_reranker import causal_rerank_format, token_id
from models.preprocessing.text_settings import read_text_settings

# torch activation class -> the name `models.scores.activate` applies.
ACTIVATIONS: dict[str, Activation] = {
    "Sigmoid": "sigmoid",
    "Identity": "identity",
    "Softmax": "softmax",
    "Tanh": "tanh",
}


class TextScorer:
    """The `TokenModel` of rerankers and text classifiers on the torch backend."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind) -> None:
        scorer = model_scorer(folder, kind)
        causal = causal_rerank_format(folder, cfg) if scorer == "causal-lm" else None
        if causal is not None:
            self._model, device, dtype = _load_causal_reranker(folder, cfg, causal.true_token, causal.false_token)
        else:
            self._model, device, dtype = _load_cross_encoder(folder, cfg)
        # A causal LM computes logits for its last position only (sentence-transformers' `logits_to_keep`).
        self._extra_inputs = {"logits_to_keep": 1} if causal is not None else {}
        self._tokenizer = self._model.tokenizer
        self._device = device
        config = self._model.config
        labels = [str(config.id2label.get(i, f"LABEL_{i}")) for i in range(self._model.num_labels)]
        scores_pairs = spec(kind).scores_pairs
        if scores_pairs and len(labels) != 1:
            raise ModelLoadError(
                f"'{cfg.model_id}' has {len(labels)} output labels; a reranker needs one. Serve it with kind "
                "'classify'."
            )
        self.info = ModelInfo.of(
            cfg,
            kind,
            dimension=len(labels),
            max_input_tokens=read_text_settings(folder, cfg, self._tokenizer.model_max_length).max_seq_length,
            normalized=False,
            device=device,
            dtype=dtype,
            labels=labels,
            activation=_activation(self._model, scores_pairs, cfg),
            scorer=scorer,
        )

    def forward(self, rows: Sequence[TokenizedText]) -> np.ndarray | Sequence[np.ndarray]:
        return self.launch(rows).wait()

    def launch(self, rows: Sequence[TokenizedText]) -> PendingOutputs:
        import torch

        from models.inference.transfer import to_host

        features = pad_rows(rows, self._tokenizer, self._device, non_blocking=self.info.backend == "torch")
        with torch.inference_mode():
            logits = self._model({**features, **self._extra_inputs, "modality": "text"})["scores"]
        return to_host(logits.float().reshape(len(rows), -1))


def _load_cross_encoder(folder: Path, cfg: ModelConfig) -> tuple[Any, str, str]:  # CrossEncoder
    from sentence_transformers import CrossEncoder

    from models.inference.device import load_on_device

    model, device, dtype = load_on_device(CrossEncoder, folder, cfg, "sequence-classification")
    if not any(name.endswith("ForSequenceClassification") for name in model.config.architectures or []):
        # transformers would add a freshly initialised head, and every score would be noise.
        raise ModelLoadError(f"'{cfg.model_id}' has no trained classification head; it cannot rerank or classify")
    if len(model) != 1 or getattr(model[0], "transformer_task", None) != "sequence-classification":
        raise ModelLoadError(f"'{cfg.model_id}' is not a sequence-classification model; it cannot rerank or classify")
    return model, device, dtype


def _load_causal_reranker(
    folder: Path, cfg: ModelConfig, true_token: str | None, false_token: str | None
) -> tuple[Any, str, str]:  # CrossEncoder
    """A CrossEncoder over a causal LM: the folder's modules, or sentence-transformers' default for a bare
    causal LM (a `LogitScore` over "yes" and "no"); configured tokens replace its `LogitScore`."""
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder.modules import LogitScore

    from models.inference.device import load_on_device

    if cfg.backend != "torch":
        raise ConfigError(f"model '{cfg.served_model_name}' is a causal-LM reranker; it runs on the torch backend only")
    model, device, dtype = load_on_device(CrossEncoder, folder, cfg, "text-generation")
    at = next((i for i, module in enumerate(model) if isinstance(module, LogitScore)), None)
    if getattr(model[0], "transformer_task", None) != "text-generation" or at is None:
        raise ModelLoadError(
            f"'{cfg.model_id}' is a causal-LM CrossEncoder without a text-generation Transformer "
            "and a LogitScore module"
        )
    if true_token is not None:
        false_id = None if false_token is None else token_id(model.tokenizer, false_token, "false_token", cfg.model_id)
        model[at] = LogitScore(token_id(model.tokenizer, true_token, "true_token", cfg.model_id), false_id)
    return model, device, dtype


def _activation(model: Any, scores_pairs: bool, cfg: ModelConfig) -> Activation:
    """Rerankers (pairs): the CrossEncoder's activation (sigmoid unless the checkpoint says otherwise).
    Classifiers (single texts): what transformers' text-classification pipeline applies."""
    if not scores_pairs:
        multi_label = model.config.problem_type == "multi_label_classification" or model.num_labels == 1
        return "sigmoid" if multi_label else "softmax"
    name = type(model.activation_fn).__name__
    if name not in ACTIVATIONS:
        raise ModelLoadError(f"'{cfg.model_id}' declares the activation {name}; supported: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]
