"""What a checkpoint is for, read from its `config.json` unless configured.

ColPali and ColQwen2 (`model_type`) embed page images and queries as multi-vectors: `colpali`. CLAP is
`clap` and the CLIP family (CLIP, SigLIP and kin) is `clip`: two towers, text and audio or images.
A `*ForSequenceClassification` head (which includes sentence-transformers CrossEncoder folders) with one
label scores (query, document) pairs: a reranker; with two or more labels it is a classifier. A causal LM
is a reranker when sentence-transformers' CrossEncoder files or its model card say so
(`models.llm_reranker`). A sentence-transformers `SparseEncoder` folder (SPLADE) is `sparse`; a bare
`*ForMaskedLM` is not, since a plain BERT checkpoint has that architecture too (`kind: sparse` serves one
with SPLADE pooling). Anything else is served as a text embedder.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from models.backends import check_kind
from models.base import Kind
from models.config import ModelConfig
from models.llm_reranker import has_qwen3_reranker_card, is_causal_cross_encoder
from models.resolve import read_json, resolve_model


def label_count(config: dict[str, Any]) -> int:
    """transformers' rule: `id2label` when present, else `num_labels`, else its default of 2."""
    if config.get("id2label"):
        return len(config["id2label"])
    return int(config.get("num_labels", 2))


@dataclass(frozen=True)
class KindSpec:
    """What a kind needs, declared once per kind (the kind registry of the restructure grows here)."""

    # Its gateway-side preprocessor needs torch: transformers' ClapFeatureExtractor refuses to load without
    # it, and ColPali's and ColQwen2's processors return torch tensors. The text tokenizers and the CLIP
    # family's image processors run without it (each tried with USE_TORCH=0).
    gateway_needs_torch: bool = False


KIND_SPECS: dict[Kind, KindSpec] = {
    "embed": KindSpec(),
    "sparse": KindSpec(),
    "rerank": KindSpec(),
    "classify": KindSpec(),
    "clip": KindSpec(),
    "clap": KindSpec(gateway_needs_torch=True),
    "colpali": KindSpec(gateway_needs_torch=True),
}


def gateway_needs_torch(kinds: Iterable[Kind]) -> bool:
    """Whether the gateway must import torch to prepare the inputs of these kinds."""
    return any(KIND_SPECS[kind].gateway_needs_torch for kind in kinds)


COLPALI_TYPES = frozenset({"colpali", "colqwen2"})
CLIP_TYPES = frozenset({"clip", "siglip", "siglip2", "chinese_clip", "altclip", "metaclip_2"})


def detect_kind(folder: Path) -> Kind:
    config = read_json(folder / "config.json")
    architectures = config.get("architectures") or []
    model_type = config.get("model_type", "")
    if model_type in COLPALI_TYPES:
        return "colpali"
    if model_type == "clap":
        return "clap"
    if model_type in CLIP_TYPES:
        return "clip"
    if any(name.endswith("ForSequenceClassification") for name in architectures):
        return "rerank" if label_count(config) == 1 else "classify"
    if is_causal_cross_encoder(folder) or has_qwen3_reranker_card(folder):
        return "rerank"
    if read_json(folder / "config_sentence_transformers.json").get("model_type") == "SparseEncoder":
        return "sparse"
    return "embed"


def model_kind(cfg: ModelConfig) -> Kind:
    """The configured kind, or the one the checkpoint's files declare; checked against the backend."""
    kind = cfg.kind if cfg.kind != "auto" else _detected_kind(cfg.model_id, cfg.revision)
    check_kind(cfg, kind)
    return kind


@cache
def _detected_kind(model_id: str, revision: str | None) -> Kind:
    return detect_kind(resolve_model(model_id, revision))
