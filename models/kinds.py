"""What a checkpoint is for, read from its `config.json` unless configured, and everything that follows from it.

ColPali and ColQwen2 (`model_type`) embed page images and queries as multi-vectors: `colpali`. CLAP is
`clap` and the CLIP family (CLIP, SigLIP and kin) is `clip`: two towers, text and audio or images.
A `*ForSequenceClassification` head (which includes sentence-transformers CrossEncoder folders) with one
label scores (query, document) pairs: a reranker; with two or more labels it is a classifier. A causal LM
is a reranker when sentence-transformers' CrossEncoder files or its model card say so
(`models.llm_reranker`). A sentence-transformers `SparseEncoder` folder (SPLADE) is `sparse`; a bare
`*ForMaskedLM` is not, since a plain BERT checkpoint has that architecture too (`kind: sparse` serves one
with SPLADE pooling). A PyLate folder (`config_sentence_transformers.json` with `model_type: ColBERT`) is
`colbert`: one vector per token, scored by MaxSim. A vision-language model under sentence-transformers modules is
`vl-embed` when they pool it (Qwen3-VL-Embedding) and `vl-rerank` when a CrossEncoder's `LogitScore` scores its
next-token logits (Qwen3-VL-Reranker). An encoder with FlagEmbedding's `colbert_linear.pt` and
`sparse_linear.pt` beside it (BGE-M3) is `hybrid`: dense, sparse and ColBERT outputs from one pass. A text model
transformers builds by itself is a text embedder (`models.text_checkpoint`); any other checkpoint (a
vision-language model no kind above serves, remote code) is refused with the reason, unless `kind:` is set.

This is the one module that names kinds: `KIND_SPECS` says what each one means everywhere else
(tests/architecture/test_kind_names.py keeps it so).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from config.errors import ConfigError
from config.kind_names import Kind
from config.settings import ModelConfig
from models.llm_reranker import has_qwen3_reranker_card, is_causal_cross_encoder, is_causal_lm
from models.resolve import read_json, resolve_model
from models.text_checkpoint import why_not_text

Modality = Literal["text", "image", "audio"]
# How a scoring model scores: a sequence-classification head (sentence-transformers' CrossEncoder), or a
# causal LM's next-token logits at the last position (`models.llm_reranker`).
Scorer = Literal["cross-encoder", "causal-lm"]


def label_count(config: dict[str, Any]) -> int:
    """transformers' rule: `id2label` when present, else `num_labels`, else its default of 2."""
    if config.get("id2label"):
        return len(config["id2label"])
    return int(config.get("num_labels", 2))


Output = Literal["dense", "sparse", "multi-vector", "scores"]
# The retrieval representations a request may name (`output_types`): one vector, vocabulary weights, one vector
# per token (late interaction).
Representation = Literal["dense", "sparse", "colbert"]
REPRESENTATION_OF: dict[Output, tuple[Representation, ...]] = {
    "dense": ("dense",),
    "sparse": ("sparse",),
    "multi-vector": ("colbert",),
    "scores": (),
}
# How a model with several representations scores a (query, document) pair: one of them, or their weighted mean.
ScoreMode = Literal["hybrid", "dense", "sparse", "colbert"]


# How a model that reranks ranks (`Engine.rank` has one method per way): a (query, document) pair's logit from
# a cross-encoder or causal LM; its own outputs for query and documents under a score mode (late interaction,
# BGE-M3's hybrid); image documents by their embeddings' similarity with the text query's; or a vision-language
# model's logit for the query with a text or image document in one sequence.
RankBy = Literal["pair-logits", "score-modes", "image-similarity", "multimodal-pair-logits"]


@dataclass(frozen=True, kw_only=True)
class KindSpec:
    """Everything that follows from a model's kind, declared once: no other module compares kind names."""

    capabilities: tuple[str, ...]  # what a request may ask of it; the first is its main one
    modalities: tuple[Modality, ...]  # what its inputs may be
    backends: tuple[str, ...]  # which backends can run it
    output: Output  # per input: one vector, vocabulary weights, one vector per token or patch, or label scores
    # The gateway-side preparation of its inputs, "module:Class" in `models.preprocessing` (a tokenizer, or the
    # checkpoint's media processor): `gateway.inputs.preprocessors` builds one per model as `Class(folder, cfg, kind)`.
    preprocessor: str
    model_service: str  # the BentoML model service that runs it (`runners/`)
    service_api: str  # that service's batchable API
    loader: str  # the class that runs it on its model service, "module:Class" (imported there only: torch)
    # The export task when ONNX Runtime runs it (`backends` then holds "onnx"); `backend: auto` tries it.
    onnx_task: str | None = None
    # The class that runs it on ONNX Runtime in numpy on the CPU, torch never imported once the export exists
    # (for `auto`, once its parity verdict does), where its checkpoint's files allow; `loader` runs it otherwise
    # (`models.inference.auto_backend.load_torch_free`).
    torch_free_loader: str | None = None
    rank_by: RankBy | None = None  # how it ranks, where "rerank" is among its capabilities
    quantizable: bool = False  # int8/uint8 codes from a calibrated scale
    takes_token_ids: bool = False  # pre-tokenized input
    takes_instruction: bool = False  # an embedding task instruction
    normalize_control: bool = False  # a request may turn normalization off
    # Text past its window may be averaged over windows (`long_input: mean`) or chunked late (token states).
    long_inputs: bool = False
    scores_pairs: bool = False  # rows are (query, document) pairs, each scored by one logit
    # How its checkpoints may score, the first unless the files say otherwise (`model_scorer`); () if it does not.
    scorers: tuple[Scorer, ...] = ()
    # Its gateway-side preprocessor needs torch: transformers' ClapFeatureExtractor refuses to load without
    # it, and ColPali's and ColQwen2's processors return torch tensors. The text tokenizers and the CLIP
    # family's image processors run without it (each tried in a process where transformers finds no torch).
    gateway_needs_torch: bool = False
    # Texts and images go through the checkpoint's whole processor, which frames them in its own prompts
    # (ColPali's query prefix and augmentation tokens, its image prompt), not through its tokenizer and
    # image processor apart.
    processor_prompts: bool = False
    # Several representations from one pass (BGE-M3), which a request names in `output_types`; () for the one
    # its `output` gives.
    extra_representations: tuple[Representation, ...] = ()
    # Query and document texts are encoded differently (PyLate's prefixes, query expansion, skiplist).
    encodes_roles: bool = False
    # One input may hold a text and images together, embedded as one (`InputItem.parts`): a vision-language
    # model reads them in one sequence. Two-tower models (CLIP, CLAP) and page retrievers take one per input.
    mixed_inputs: bool = False
    # Its checkpoints may carry one peft LoRA adapter per task (`models.adapters`), chosen per request (`task`);
    # on torch only.
    takes_tasks: bool = False

    @property
    def live_api(self) -> str:
        """That service's API for live queries' calls, run beside its batches (runners/model_services.py)."""
        return f"{self.service_api}_live"

    @property
    def takes_media(self) -> bool:
        """Whether its inputs may be images or audio: fetched, keyed in the cache by their bytes, and processed
        by the checkpoint's processor rather than tokenized."""
        return any(modality != "text" for modality in self.modalities)

    @property
    def representations(self) -> tuple[Representation, ...]:
        """What `output_types` may name for it, its default first."""
        return REPRESENTATION_OF[self.output] + self.extra_representations

    @property
    def score_modes(self) -> tuple[ScoreMode, ...]:
        """How `score_mode` may rank with it, its default first; () where it ranks one way only."""
        return ("hybrid", *self.representations) if len(self.representations) > 1 else ()


# The gateway-side preparations (`KindSpec.preprocessor`) and the model classes (`KindSpec.loader`), by module.
TEXT_TOKENIZER = "models.preprocessing.text_tokenizer:TextTokenizer"
MEDIA_PROCESSOR = "models.preprocessing.media_processor:MediaProcessor"
TEXT_ENCODER = "models.inference.text_encoder:TextEncoder"
ONNX_TEXT_ENCODER = "models.inference.onnx_encoder:OnnxTextEncoder"
ONNX_TEXT_SCORER = "models.inference.onnx_scorer:OnnxTextScorer"
ONNX_COLBERT_ENCODER = "models.inference.onnx_colbert:OnnxColbertEncoder"
SPARSE_ENCODER = "models.inference.sparse_encoder:SparseTextEncoder"
TEXT_SCORER = "models.inference.text_scorer:TextScorer"
MEDIA_ENCODER = "models.inference.media_encoder:MediaEncoder"
COLBERT_ENCODER = "models.inference.colbert_encoder:ColbertEncoder"
HYBRID_ENCODER = "models.inference.hybrid_encoder:HybridEncoder"
VL_PROCESSOR = "models.preprocessing.vl_processor:VisionLanguageProcessor"
VL_ENCODER = "models.inference.vl_encoder:VisionLanguageEncoder"
VL_SCORER = "models.inference.vl_scorer:VisionLanguageScorer"
KIND_SPECS: dict[Kind, KindSpec] = {
    "embed": KindSpec(
        capabilities=("embed",),
        modalities=("text",),
        backends=("torch", "onnx", "ctranslate2"),
        output="dense",
        preprocessor=TEXT_TOKENIZER,
        model_service="TextEmbedder",
        service_api="embed",
        loader=TEXT_ENCODER,
        onnx_task="feature-extraction",
        torch_free_loader=ONNX_TEXT_ENCODER,
        quantizable=True,
        takes_token_ids=True,
        takes_instruction=True,
        normalize_control=True,
        long_inputs=True,
        takes_tasks=True,
    ),
    "sparse": KindSpec(
        capabilities=("embed_sparse", "embed"),
        modalities=("text",),
        backends=("torch",),
        output="sparse",
        preprocessor=TEXT_TOKENIZER,
        model_service="TextEmbedder",
        service_api="embed",
        loader=SPARSE_ENCODER,
        takes_token_ids=True,
        takes_instruction=True,
    ),
    "rerank": KindSpec(
        capabilities=("rerank",),
        modalities=("text",),
        backends=("torch", "onnx"),
        output="scores",
        preprocessor=TEXT_TOKENIZER,
        model_service="Reranker",
        service_api="score",
        loader=TEXT_SCORER,
        onnx_task="sequence-classification",
        torch_free_loader=ONNX_TEXT_SCORER,
        rank_by="pair-logits",
        scores_pairs=True,
        scorers=("cross-encoder", "causal-lm"),
    ),
    "classify": KindSpec(
        capabilities=("classify",),
        modalities=("text",),
        backends=("torch", "onnx"),
        output="scores",
        preprocessor=TEXT_TOKENIZER,
        model_service="Reranker",
        service_api="score",
        loader=TEXT_SCORER,
        onnx_task="sequence-classification",
        torch_free_loader=ONNX_TEXT_SCORER,
        scorers=("cross-encoder",),
    ),
    "clip": KindSpec(
        capabilities=("embed", "rerank"),
        modalities=("text", "image"),
        backends=("torch",),
        output="dense",
        preprocessor=MEDIA_PROCESSOR,
        model_service="ClipEmbedder",
        service_api="encode",
        loader=MEDIA_ENCODER,
        rank_by="image-similarity",
        quantizable=True,
    ),
    "clap": KindSpec(
        capabilities=("embed",),
        modalities=("text", "audio"),
        backends=("torch",),
        output="dense",
        preprocessor=MEDIA_PROCESSOR,
        model_service="ClapEmbedder",
        service_api="encode",
        loader=MEDIA_ENCODER,
        quantizable=True,
        gateway_needs_torch=True,
    ),
    "colpali": KindSpec(
        capabilities=("embed", "rerank"),
        modalities=("text", "image"),
        backends=("torch",),
        output="multi-vector",
        preprocessor=MEDIA_PROCESSOR,
        model_service="ColPaliEmbedder",
        service_api="encode",
        loader=MEDIA_ENCODER,
        rank_by="image-similarity",
        gateway_needs_torch=True,
        processor_prompts=True,
    ),
    "colbert": KindSpec(
        capabilities=("embed", "rerank"),
        modalities=("text",),
        backends=("torch", "onnx"),
        output="multi-vector",
        preprocessor=TEXT_TOKENIZER,
        model_service="TextEmbedder",
        service_api="embed",
        loader=COLBERT_ENCODER,
        onnx_task="feature-extraction",
        torch_free_loader=ONNX_COLBERT_ENCODER,
        rank_by="score-modes",
        encodes_roles=True,
    ),
    "hybrid": KindSpec(
        capabilities=("embed", "embed_sparse", "rerank"),
        modalities=("text",),
        backends=("torch",),
        output="dense",
        preprocessor=TEXT_TOKENIZER,
        model_service="TextEmbedder",
        service_api="embed",
        loader=HYBRID_ENCODER,
        rank_by="score-modes",
        quantizable=True,
        extra_representations=("sparse", "colbert"),
    ),
    # A vision-language embedder (Qwen3-VL-Embedding): a text, an image or both in one chat-framed sequence, one
    # vector from its last token. Videos are not taken here (models/preprocessing/vl_processor.py says why).
    "vl-embed": KindSpec(
        capabilities=("embed",),
        modalities=("text", "image"),
        backends=("torch",),
        output="dense",
        preprocessor=VL_PROCESSOR,
        model_service="ColPaliEmbedder",
        service_api="encode",
        loader=VL_ENCODER,
        takes_instruction=True,  # as the system message (its prompts too: `prompt_name`, `input_type`)
        mixed_inputs=True,
    ),
    # A vision-language reranker (Qwen3-VL-Reranker): the text query with a text or image document in the
    # checkpoint's chat-framed pair, scored by its "yes" against "no" logit at the last position.
    "vl-rerank": KindSpec(
        capabilities=("rerank",),
        modalities=("text", "image"),
        backends=("torch",),
        output="scores",
        preprocessor=VL_PROCESSOR,
        model_service="ColPaliEmbedder",
        service_api="encode",
        loader=VL_SCORER,
        rank_by="multimodal-pair-logits",
        scores_pairs=True,
    ),
}


def spec(kind: Kind) -> KindSpec:
    return KIND_SPECS[kind]


def gateway_needs_torch(kinds: Iterable[Kind]) -> bool:
    """Whether the gateway must import torch to prepare the inputs of these kinds."""
    return any(KIND_SPECS[kind].gateway_needs_torch for kind in kinds)


HYBRID_HEADS = ("colbert_linear.pt", "sparse_linear.pt")  # FlagEmbedding's head files beside the encoder (BGE-M3)
COLPALI_TYPES = frozenset({"colpali", "colqwen2", "colmodernvbert"})
CLIP_TYPES = frozenset({"clip", "siglip", "siglip2", "chinese_clip", "altclip", "metaclip_2"})
# The image processor of Qwen2-VL, Qwen2.5-VL and Qwen3-VL, whose patches, grids and placeholder expansion
# `models.preprocessing.vl_processor` reproduces.
QWEN_VL_IMAGE_PROCESSORS = frozenset({"Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast", "Qwen2VLImageProcessorPil"})


def vision_language_kind(folder: Path, config: dict[str, Any]) -> Kind | None:
    """A vision-language model (a vision sub-config) with Qwen-VL's image processor, which the `vl-*` kinds frame,
    whose sentence-transformers Transformer module takes images (`sentence_bert_config.json`): an embedder when a
    Pooling module follows it (Qwen3-VL-Embedding), a reranker when a `LogitScore` module does (Qwen3-VL-Reranker);
    None otherwise (EmbeddingGemma-2's processor, say, is not framed here)."""
    modality_config = read_json(folder / "sentence_bert_config.json").get("modality_config") or {}
    if "vision_config" not in config or "image" not in modality_config:
        return None
    if image_processor_type(folder) not in QWEN_VL_IMAGE_PROCESSORS:
        return None
    modules_file = folder / "modules.json"
    modules = json.loads(modules_file.read_text()) if modules_file.is_file() else []
    types = [str(module.get("type", "")).rpartition(".")[2] for module in modules]
    if "Pooling" in types:
        return "vl-embed"
    return "vl-rerank" if "LogitScore" in types else None


def image_processor_type(folder: Path) -> str | None:
    """The image processor a checkpoint declares: in `preprocessor_config.json`, or under `processor_config.json`."""
    declared = read_json(folder / "preprocessor_config.json").get("image_processor_type")
    nested = read_json(folder / "processor_config.json").get("image_processor") or {}
    return declared or nested.get("image_processor_type")


def detect_kind(folder: Path) -> Kind:
    config = read_json(folder / "config.json")
    if (vision_language := vision_language_kind(folder, config)) is not None:
        return vision_language
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
    st_type = read_json(folder / "config_sentence_transformers.json").get("model_type")
    if st_type == "SparseEncoder":
        return "sparse"
    if st_type == "ColBERT":
        return "colbert"
    if all((folder / head).is_file() for head in HYBRID_HEADS):
        return "hybrid"
    # Kinds that serve media checkpoints told by their files (a vision-language model's modules) go above.
    if (reason := why_not_text(folder, config)) is not None:
        raise ConfigError(
            f"cannot tell which kind of model '{folder}' is: {reason}; set `kind:` in its configuration "
            f"({', '.join(KIND_SPECS)}) to serve it as one of them"
        )
    return "embed"  # a text model transformers builds by itself


def model_scorer(folder: Path, kind: Kind) -> Scorer | None:
    """How a model of a scoring kind scores: a causal LM's logits where its kind allows that and the checkpoint
    is a causal LM, else its kind's first way (a CrossEncoder head). None for kinds that do not score."""
    scorers = spec(kind).scorers
    if "causal-lm" in scorers and is_causal_lm(folder):
        return "causal-lm"
    return scorers[0] if scorers else None


def model_kind(cfg: ModelConfig) -> Kind:
    """The configured kind, or the one the checkpoint's files declare; checked against the backend."""
    kind = cfg.kind if cfg.kind != "auto" else _detected_kind(cfg.model_id, cfg.revision)
    check_kind(cfg, kind)
    return kind


def check_kind(cfg: ModelConfig, kind: Kind) -> None:
    backends = spec(kind).backends
    if cfg.backend != "auto" and cfg.backend not in backends:
        raise ConfigError(
            f"model '{cfg.served_model_name}' is a {kind} model; backend '{cfg.backend}' cannot run it "
            f"(it runs on {list(backends)})"
        )


@cache
def _detected_kind(model_id: str, revision: str | None) -> Kind:
    return detect_kind(resolve_model(model_id, revision))


def model_class(kind: Kind) -> type:
    """The class that runs this kind (`KindSpec.loader`); importing it imports torch."""
    return _class_named(spec(kind).loader)


def torch_free_class(kind: Kind) -> type | None:
    """The class that runs this kind on ONNX Runtime without torch (`KindSpec.torch_free_loader`), if any."""
    loader = spec(kind).torch_free_loader
    return None if loader is None else _class_named(loader)


def preprocessor_class(kind: Kind) -> type:
    """The gateway-side class that prepares this kind's inputs (`KindSpec.preprocessor`)."""
    return _class_named(spec(kind).preprocessor)


def _class_named(path: str) -> type:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
