"""OpenAI's embeddings API (`POST /v1/embeddings`, and at infinity's `/embeddings`) and its model list: the body
becomes an `EmbedQuery`, the `Embeddings` OpenAI's answer. The body carries the Embento extensions /v1/embeddings
documents (typed media items, `modality`, prompts and instructions, `normalize`, sparse and truncation
controls); other families' bodies have adapters of their own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
)
from starlette.responses import Response

from config import errors
from gateway.queries import EmbedQuery, InputType, LongInput, OutputType
from gateway.results import Embeddings
from gateway.served.registry import ModelRegistry
from gateway.tenants.keys import allowed
from gateway.validation.bodies import check_long_input_fields
from gateway.wire.common import (
    SHORT_INPUT_TYPES,
    EmbeddingInput,
    KeepAlive,
    TruncationControls,
    Usage,
    input_items,
    json_answer,
    reworded_union,
)
from models.adapters import named_tasks
from models.base import Modality, ModelInfo, Representation
from models.postprocess import to_base64

if TYPE_CHECKING:
    from gateway.engine import Engine


LongInputName = Literal["truncate", "error", "mean"]


class EmbeddingRequest(TruncationControls, KeepAlive):
    """POST /v1/embeddings. Unknown fields are ignored, as OpenAI SDK extras may add some."""

    input: EmbeddingInput = Field(
        description="A string, a list of strings, token ids, lists of token ids, or typed items "
        '({"text": ...}, {"image": ...}, {"audio": ...}) for multimodal models.'
    )
    model: str | None = Field(None, description="Served model name; defaults to the first configured model.")
    encoding_format: OutputType = Field(
        "float",
        description="float or base64 (OpenAI's), or Embento's quantized "
        "int8, uint8 (scale fixed per model), binary, ubinary (packed sign bits).",
    )
    dimensions: StrictInt | None = Field(None, description="Matryoshka: keep the first N features, re-normalized.")
    user: str | None = Field(None, description="Accepted and ignored.")
    input_type: InputType | None = Field(
        None,
        description=(
            "Cohere's input kind (Voyage's `query` and `document` too): the model's prompt for it (e5 `query: `, nomic "
            "`search_query: `...), unless prompt_name is given; a ColBERT model's query or document encoding."
        ),
    )
    task: StrictStr | None = Field(
        None,
        description=(
            "Jina's: the task adapter to embed through, for models with task adapters (GET /v1/models: `tasks`), "
            "e.g. `retrieval.query`, `text-matching`; required there unless input_type names one."
        ),
    )
    modality: Modality = Field(
        "text",
        description="infinity's field: what plain strings in `input` are; images "
        "and audio as data URIs or http(s) URLs.",
    )
    prompt_name: str | None = Field(None, description="A named prompt of the model (e.g. 'query').")
    instruction: StrictStr | None = Field(
        None,
        description="A task instruction for queries, written with the model's instruction template (Qwen3-"
        "Embedding: `Instruct: {instruction}\\nQuery:`), else prepended as is. Not with prompt_name.",
    )
    normalize: StrictBool | None = Field(
        None,
        description="Unit-length vectors, or false for the raw pooled "
        "vector; the model's own behaviour when omitted. Text embedders only.",
    )
    max_active_dims: StrictInt | None = Field(None, description="Sparse models: keep the N largest weights.")
    max_tokens: StrictInt | None = Field(
        None, description="Cohere's: cut text to at most N tokens (the model's own limit when that is lower)."
    )
    long_input: LongInputName | None = Field(
        None,
        description=(
            "Text past the model's window: `truncate` (the default) cuts it, `error` refuses it with a 400 (as "
            "`truncate: false`), `mean` embeds it in windows of the model's limit and returns their mean, weighted "
            "by tokens (docs/api.md: Long inputs). Dense text embedders."
        ),
    )
    late_chunking: StrictBool = Field(
        False,
        description=(
            "Jina's: the inputs are the chunks of one document, in order; each chunk's vector is the mean of its "
            "tokens' states in the encoding of the whole document (joined with spaces). Dense text embedders."
        ),
    )
    output_types: list[Representation] | None = Field(
        None,
        description=(
            "The representations to answer, each under its own key of `data[i]`: `dense` in `embedding`, `sparse` in "
            "`sparse` ({indices, values}), `colbert` in `multi_vector` (one vector per token). BGE-M3 gives any of "
            "the three from one pass; other models their one (GET /v1/models: `outputs`). Omitted: the model's own "
            "output, in `embedding`."
        ),
    )

    _input_message = reworded_union("input")

    @field_validator("input_type", mode="before")
    @classmethod
    def _voyage_names(cls, value: Any) -> Any:
        return SHORT_INPUT_TYPES.get(value, value) if isinstance(value, str) else value


def embed_query(body: EmbeddingRequest) -> EmbedQuery:
    check_long_input_fields(body.late_chunking, body.long_input, body.truncate)
    return EmbedQuery(
        items=input_items(body.input, body.modality),
        model=body.model,
        output_types=(body.encoding_format,),
        dimensions=body.dimensions,
        normalize=body.normalize,
        max_active_dims=body.max_active_dims,
        prompt_name=body.prompt_name,
        instruction=body.instruction,
        input_type=body.input_type,
        task=body.task,
        truncation=replace(body.truncation(), max_tokens=body.max_tokens),
        long_input=LongInput.LATE_CHUNKING if body.late_chunking else LongInput(body.long_input or "truncate"),
        representations=None if body.output_types is None else tuple(dict.fromkeys(body.output_types)),
        keep_alive_s=body.keep_alive_s(),
    )


class SparseEmbedding(BaseModel):
    """The active entries of a sparse (SPLADE) embedding: vocabulary indices, ascending, and their weights."""

    indices: list[int]
    values: list[float]

    @staticmethod
    def answer(entries: np.ndarray) -> dict[str, np.ndarray]:
        """This shape from (2, active) [indices; weights], as arrays for `json_answer`: the weights written in
        float32's shortest digits, as every vector is."""
        return {"indices": entries[0].astype(np.int64), "values": np.ascontiguousarray(entries[1], dtype=np.float32)}


class EmbeddingData(BaseModel):
    """One input's embedding, as the route's schema declares it (`embedding_response` writes the answer).
    Without `output_types`, the model's own output in `embedding` (with `shape` for a base64 multi-vector); with
    it, each asked representation under its key. Keys with nothing to say are left out: one class, so that
    BentoML's client, which reads a union's first member only, keeps every key."""

    object: Literal["embedding"] = "embedding"
    index: int
    # `str` (base64) first: BentoML's schema keeps only a union's first member, and its Python client
    # walks a declared array character by character when the value is a base64 string.
    embedding: str | list[float] | list[int] | list[list[float]] | SparseEmbedding | None = None  # list[int]: codes
    shape: list[int] | None = Field(None, description="A base64 multi-vector embedding's [rows, dim].")
    sparse: SparseEmbedding | None = Field(None, description="`output_types` with `sparse`: indices and values.")
    multi_vector: str | list[list[float]] | None = Field(None, description="`output_types` with `colbert`.")
    multi_vector_shape: list[int] | None = Field(None, description="With base64: the multi-vector's [rows, dim].")


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: Usage


def embedding_response(embeddings: Embeddings) -> dict:
    """OpenAI's shape, as a dict holding float32 arrays for `json_answer` to write: vectors cut to `dimensions`
    (re-normalized) and encoded; multi-vectors keep their shape; sparse ones are their active entries, the
    largest `max_active_dims` of them; with `output_types`, each asked representation under its key."""
    encoding_format = embeddings.query.output_types[0]
    if embeddings.parts is not None:
        return _answer(embeddings, _representations_data(embeddings, encoding_format))
    if embeddings.info.multi_vector:
        values = [_matrix("embedding", "shape", output, encoding_format) for output in embeddings.outputs]
    elif embeddings.info.sparse:
        values = [{"embedding": SparseEmbedding.answer(entries)} for entries in embeddings.sparse_entries()]
    else:
        values = [{"embedding": v} for v in embeddings.encoded(encoding_format, embeddings.vectors())]
    return _answer(embeddings, [{"object": "embedding", "index": i, **value} for i, value in enumerate(values)])


def _answer(embeddings: Embeddings, data: list[dict]) -> dict:
    return {
        "object": "list",
        "data": data,
        "model": embeddings.model,
        "usage": Usage.of(embeddings.tokens, embeddings.cached_tokens).model_dump(),
    }


def _representations_data(embeddings: Embeddings, encoding_format: OutputType) -> list[dict]:
    """Each input's asked representations under their keys: the encoding applies to dense and multi-vector ones,
    sparse ones are always indices and values."""
    asked, count = embeddings.query.representations or (), len(embeddings.outputs)
    data: list[dict] = [{"object": "embedding", "index": index} for index in range(count)]
    if "dense" in asked:
        for item, vector in zip(data, embeddings.encoded(encoding_format, embeddings.vectors())):
            item["embedding"] = vector
    if "sparse" in asked:
        for item, entries in zip(data, embeddings.sparse_entries()):
            item["sparse"] = SparseEmbedding.answer(entries)
    if "colbert" in asked:
        for item, matrix in zip(data, embeddings.of("colbert")):
            item |= _matrix("multi_vector", "multi_vector_shape", matrix, encoding_format)
    return data


def _matrix(key: str, shape_key: str, matrix: np.ndarray, encoding_format: str) -> dict:
    """One vector per token under `key`: its float32 array, or in base64 the flat buffer and its shape."""
    if encoding_format == "base64":
        return {key: to_base64(matrix), shape_key: list(matrix.shape)}
    return {key: np.ascontiguousarray(matrix, dtype=np.float32)}


def embedding_answer(embeddings: Embeddings) -> Response:
    """Written straight from the float32 arrays: through pydantic, a 32-vector answer was about an eighth of
    the gateway's CPU for the request (bench/gateway_floor.py --profile-dir)."""
    return json_answer(embedding_response(embeddings))


async def embed(engine: Engine, body: EmbeddingRequest) -> Response:
    return embedding_answer(await engine.embed(embed_query(body)))


# GET /v1/models
class ModelCard(BaseModel):
    """One entry of GET /v1/models: OpenAI's fields plus what a client needs to call the model."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "embento"
    status: Literal["loaded"] = "loaded"
    alias_of: str | None = Field(None, description="For an alias: the model it names now.")
    modalities: list[str]
    capabilities: list[str]
    backend: str
    backend_reason: str = Field(
        "",
        description="Why the model runs on `backend`: configured, or what `backend: "
        "auto` found (the model's kind, its device, its export's parity with torch).",
    )
    dimension: int
    max_input_tokens: int
    multi_vector: bool = False
    sparse: bool = False  # `dimension` is then the vocabulary size
    outputs: list[str] = Field(default_factory=list, description="What `output_types` may name for it.")
    tasks: list[str] = Field(
        default_factory=list,
        description="What `task` may name for it (its task adapters); empty for a model without them.",
    )
    score_modes: list[str] = Field(
        default_factory=list,
        description=(
            "What rerank's `score_mode` may name for it (the first is its default); empty where it ranks one way."
        ),
    )
    labels: list[str] | None = None
    pass_budget_ms: float | None = Field(
        None,
        description="How long one call to it may take while live queries wait: indexing work is cut to it "
        "(its `pass_budget_ms`, configured or its device's).",
    )
    quantization: dict | None = Field(
        None,
        description="The int8/uint8 coding: its scheme (symmetric or "
        "per_dimension), source, and per number of features its scale or "
        "[[mins], [maxs]] (the quantization_ranges file format).",
    )


class FailedModel(BaseModel):
    """A configured model that failed to load (served anyway with `allow_partial`): why."""

    id: str
    error: str
    status: Literal["failed"] = "failed"


class AvailableModel(BaseModel):
    """A configured model not loaded now: `unloaded` (lazy, evicted or unloaded by the admin) or `loading`."""

    id: str
    status: Literal["unloaded", "loading"]


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
    failed: list[FailedModel] = Field(default_factory=list)
    available: list[AvailableModel] = Field(
        default_factory=list, description="Configured models not loaded now; a request loads a lazy or evicted one."
    )


def model_list(
    registry: ModelRegistry, created: int, states: Mapping[str, str], aliases: Mapping[str, str]
) -> ModelList:
    """The loaded models (and each alias, as a card of the model it names), the failed, and the others by state."""
    if not registry.done:
        raise errors.NotReady("models are still loading; retry shortly")
    infos = allowed(registry.infos)
    cards = [_model_card(info, registry, created) for info in infos.values()]
    cards += [
        _model_card(infos[target], registry, created, alias) for alias, target in aliases.items() if target in infos
    ]
    available = allowed({name: state for name, state in states.items() if state in ("unloaded", "loading")})
    return ModelList(
        data=cards,
        failed=[FailedModel(id=name, error=reason) for name, reason in allowed(registry.failed).items()],
        available=[AvailableModel(id=name, status=state) for name, state in available.items()],
    )


def _model_card(info: ModelInfo, registry: ModelRegistry, created: int, alias: str | None = None) -> ModelCard:
    quantizer = registry.quantizers.get(info.served_model_name)
    return ModelCard(
        id=alias or info.served_model_name,
        alias_of=alias and info.served_model_name,
        created=created,
        modalities=info.modalities,
        capabilities=info.capabilities,
        backend=info.backend,
        backend_reason=info.backend_reason,
        dimension=info.dimension,
        max_input_tokens=info.max_input_tokens,
        multi_vector=info.multi_vector,
        sparse=info.sparse,
        outputs=list(info.spec.representations),
        score_modes=list(info.spec.score_modes),
        tasks=named_tasks(info.tasks),
        labels=info.labels if "classify" in info.spec.capabilities else None,  # what a classifier answers
        pass_budget_ms=info.pass_budget_ms or None,
        quantization=quantizer.report(info.dimension, info.normalized) if quantizer else None,
    )
