"""The sentence-transformers modules after a checkpoint's transformer (Pooling, Dense, Normalize), read from its
files as data and applied in numpy, as `models.inference.text_encoder` has sentence-transformers build and run
them in torch: the same defaults (mean pooling and a closing Normalize for a plain transformers folder), the same
configured overrides (`pooling`, `normalize`).

A layout with anything else (another module type, a Dense layer's weights only in a pickle, an activation other
than identity or tanh) raises `TorchNeeded`: the torch-backed class runs that checkpoint instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from config.settings import ModelConfig

# sentence-transformers' legacy pooling flags, in its order (`_LEGACY_POOLING_MODE_KWARGS`).
LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
POOLING_MODES = frozenset(LEGACY_POOLING.values())
# The activations a Dense layer may name here, by whether they are tanh.
ACTIVATIONS = {"torch.nn.modules.linear.Identity": False, "torch.nn.modules.activation.Tanh": True}


class TorchNeeded(Exception):
    """The checkpoint's modules include one this module does not run in numpy."""


@dataclass(frozen=True)
class Dense:
    weight: np.ndarray  # (out, in)
    bias: np.ndarray | None
    tanh: bool

    def __call__(self, vectors: np.ndarray) -> np.ndarray:
        out = vectors @ self.weight.T
        if self.bias is not None:
            out = out + self.bias
        return np.tanh(out) if self.tanh else out


@dataclass(frozen=True)
class SentenceHead:
    """Pooling over the token states, then Dense layers; `normalized`: a closing Normalize (applied per row)."""

    modes: tuple[str, ...]
    include_prompt: bool
    dense: list[Dense] = field(default_factory=list)
    normalized: bool = False

    def dimension(self, hidden: int) -> int:
        return self.dense[-1].weight.shape[0] if self.dense else len(self.modes) * hidden

    def __call__(self, states: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(rows, features) float32 from (rows, positions, hidden) states under `mask` (prompt tokens already
        cleared where excluded, as `TextEncoder` clears them before Pooling sees the mask)."""
        vectors = np.concatenate([_pool(mode, states, mask) for mode in self.modes], axis=-1)
        for layer in self.dense:
            vectors = layer(vectors)
        return vectors.astype(np.float32)


def read_head(folder: Path, cfg: ModelConfig) -> SentenceHead:
    """The folder's head as sentence-transformers would build it for this configuration (text_encoder's
    `_load_sentence_transformer`), or `TorchNeeded`."""
    modules_file = folder / "modules.json"
    declared = modules_file.is_file()
    modules = json.loads(modules_file.read_text()) if declared else [{"type": "Transformer", "path": ""}]
    types = [str(module.get("type", "")).rpartition(".")[2] for module in modules]
    if not types or types[0] != "Transformer" or modules[0].get("path", "") != "":
        raise TorchNeeded(f"its first module is {modules[0].get('type') if modules else 'missing'}")
    modes: tuple[str, ...] = ("mean",)  # what sentence-transformers adds to a plain transformers folder
    include_prompt = True
    dense: list[Dense] = []
    normalize_at: list[int] = []
    for at, (kind, module) in enumerate(zip(types[1:], modules[1:]), start=1):
        path = folder / str(module.get("path", ""))
        if kind == "Pooling" and at == 1:
            modes, include_prompt = _read_pooling(path)
        elif kind == "Dense" and at > 1:
            dense.append(_read_dense(path))
        elif kind == "Normalize":
            normalize_at.append(at)
        else:
            raise TorchNeeded(f"its module {module.get('type')} at position {at} runs on torch only")
    if len(types) == 1 or types[1] != "Pooling":
        if declared:
            raise TorchNeeded("its modules have no Pooling right after the transformer")
    if any(at != len(types) - 1 for at in normalize_at):
        raise TorchNeeded("its Normalize module is not its last")
    if cfg.pooling is not None:
        modes = (cfg.pooling,)
    # Plain transformers checkpoints declare nothing; OpenAI-style clients expect unit vectors (as text_encoder).
    normalize = cfg.normalize if cfg.normalize is not None else (True if not declared else None)
    normalized = bool(normalize_at) if normalize is None else normalize
    return SentenceHead(modes, include_prompt, dense, normalized)


def _read_pooling(path: Path) -> tuple[tuple[str, ...], bool]:
    config = json.loads((path / "config.json").read_text())
    mode: Any = config.get("pooling_mode")
    if mode is None:
        mode = [name for key, name in LEGACY_POOLING.items() if config.get(key)] or ["mean"]
    modes = (mode,) if isinstance(mode, str) else tuple(mode)
    if not modes or any(m not in POOLING_MODES for m in modes):
        raise TorchNeeded(f"its pooling mode {mode!r} is not one sentence-transformers has")
    return modes, bool(config.get("include_prompt", True))


def _read_dense(path: Path) -> Dense:
    from safetensors.numpy import load_file

    config = json.loads((path / "config.json").read_text())
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in ACTIVATIONS or not (path / "model.safetensors").is_file():
        raise TorchNeeded(f"its Dense layer ({activation}, weights not in safetensors) runs on torch")
    weights = load_file(str(path / "model.safetensors"))
    bias = weights.get("linear.bias") if config.get("bias", True) else None
    return Dense(
        weights["linear.weight"].astype(np.float32),
        None if bias is None else bias.astype(np.float32),
        ACTIVATIONS[activation],
    )


def _pool(mode: str, states: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """One pooling mode, as sentence-transformers' `Pooling._forward_padded` computes it."""
    rows, width, hidden = states.shape
    weights = mask[:, :, None].astype(states.dtype)
    if mode == "cls":  # the first position the mask keeps
        return states[np.arange(rows), mask.argmax(axis=1)]
    if mode == "max":
        return np.where(weights > 0, states, -np.inf).max(axis=1)
    if mode in ("mean", "mean_sqrt_len_tokens"):
        counts = np.maximum(weights.sum(axis=1), 1e-9)
        return (states * weights).sum(axis=1) / (counts if mode == "mean" else np.sqrt(counts))
    if mode == "weightedmean":  # position weights counted from each row's first position the mask keeps
        first = mask.argmax(axis=1)
        positions = np.arange(1, width + 1, dtype=states.dtype)[None, :, None] - first[:, None, None]
        weighted = weights * positions
        return (states * weighted).sum(axis=1) / np.maximum(weighted.sum(axis=1), 1e-9)
    # lasttoken: the last position the mask keeps (the first position if it keeps none)
    kept = mask[:, ::-1].max(axis=1)
    last = np.where(kept == 0, 0, width - 1 - mask[:, ::-1].argmax(axis=1))
    return (states * weights)[np.arange(rows), last]
