"""Typed wire formats (OpenAI's, with infinity's and TEI's extensions) and the request-validation layer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Union

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from gateway.embeddings import Embeddings, OutputType
from models.base import Modality, ModelInfo, Truncation
from models.errors import InvalidRequest
from models.postprocess import keep_largest, to_base64

TokenIds = list[StrictInt]
InputType = Literal["search_query", "search_document", "classification", "clustering", "image"]


class TextItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: StrictStr


class ImageItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    image: StrictStr = Field(description="A data URI (data:image/png;base64,...) or an http(s) URL.")


class AudioItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    audio: StrictStr = Field(description="A data URI (data:audio/wav;base64,...) or an http(s) URL.")


TypedItem = Union[TextItem, ImageItem, AudioItem]
EmbeddingInput = Union[StrictStr, list[StrictStr | TypedItem], TokenIds, list[TokenIds]]


class TruncationControls(BaseModel):
    """TEI's per-request truncation fields, on every text route that takes them."""

    truncate: StrictBool | None = Field(None, description="Cut input longer than the model takes (the default); "
                                        "false refuses it with a 400 naming the input.")
    truncation_direction: Literal["right", "left"] | None = Field(
        None, description="Which end is cut: right (the default of most tokenizers) or left.")

    @field_validator("truncation_direction", mode="before")
    @classmethod
    def _either_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value  # TEI takes "Right" and "Left" too

    def truncation(self) -> Truncation:
        return Truncation(enabled=self.truncate is not False, side=self.truncation_direction)


class EmbeddingRequest(TruncationControls):
    """POST /v1/embeddings. Unknown fields are ignored, as OpenAI SDK extras may add some."""

    input: EmbeddingInput = Field(
        description="A string, a list of strings, token ids, lists of token ids, or typed items "
        '({"text": ...}, {"image": ...}, {"audio": ...}) for multimodal models.'
    )
    model: str | None = Field(None, description="Served model name; defaults to the first configured model.")
    encoding_format: OutputType = Field("float", description="float or base64 (OpenAI's), or Embento's quantized "
                                        "int8, uint8 (scale fixed per model), binary, ubinary (packed sign bits).")
    dimensions: StrictInt | None = Field(None, description="Matryoshka: keep the first N features, re-normalized.")
    user: str | None = Field(None, description="Accepted and ignored.")
    input_type: InputType | None = Field(None, description="Cohere's input kind: the model's prompt for it (e5 "
                                         "`query: `, nomic `search_query: `...), unless prompt_name is given.")
    modality: Modality = Field("text", description="infinity's field: what plain strings in `input` are; images "
                               "and audio as data URIs or http(s) URLs.")
    prompt_name: str | None = Field(None, description="A named prompt of the model (e.g. 'query').")
    instruction: StrictStr | None = Field(
        None, description="A task instruction for queries, written with the model's instruction template (Qwen3-"
        "Embedding: `Instruct: {instruction}\\nQuery:`), else prepended as is. Not with prompt_name.")
    normalize: StrictBool | None = Field(None, description="Unit-length vectors, or false for the raw pooled "
                                         "vector; the model's own behaviour when omitted. Text embedders only.")
    max_active_dims: StrictInt | None = Field(None, description="Sparse models: keep the N largest weights.")
    max_tokens: StrictInt | None = Field(None, description="Cohere's: cut text to at most N tokens (the model's "
                                         "own limit when that is lower).")

    def truncation(self) -> Truncation:
        return replace(super().truncation(), max_tokens=self.max_tokens)

    @field_validator("input", mode="wrap")
    @classmethod
    def _one_clear_message(cls, value: object, handler: ValidatorFunctionWrapHandler) -> EmbeddingInput:
        return one_clear_message(value, handler, "input")


def one_clear_message(value: object, handler: ValidatorFunctionWrapHandler, field: str) -> EmbeddingInput:
    try:
        return handler(value)
    except ValidationError:  # the union's per-branch errors help nobody
        raise ValueError(
            f"{field} must be a string, a list of strings or typed items ({{\"text\"|\"image\"|\"audio\": "
            "...}), a list of token ids, or a list of token-id lists"
        ) from None


class LegacyMediaRequest(BaseModel):
    """infinity's deprecated POST /embeddings_image and /embeddings_audio."""

    input: StrictStr | list[StrictStr]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None

    def as_embedding_request(self, modality: Modality) -> EmbeddingRequest:
        return EmbeddingRequest(input=self.input, model=self.model, encoding_format=self.encoding_format,
                                user=self.user, modality=modality)


class SparseEmbedding(BaseModel):
    """The active entries of a sparse (SPLADE) embedding: vocabulary indices, ascending, and their weights."""

    indices: list[int]
    values: list[float]

    @classmethod
    def of(cls, entries: np.ndarray) -> SparseEmbedding:
        return cls.model_construct(indices=entries[0].astype(np.int64).tolist(), values=entries[1].tolist())


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    # `str` (base64) first: BentoML's schema keeps only a union's first member, and its Python client
    # walks a declared array character by character when the value is a base64 string.
    embedding: str | list[float] | list[int] | list[list[float]] | SparseEmbedding  # list[int]: quantized codes


class MultiVectorData(EmbeddingData):
    """A multi-vector embedding in base64: the flat little-endian float32 buffer, and its (rows, dim)."""

    shape: list[int]


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, tokens: int) -> Usage:
        return cls(prompt_tokens=tokens, total_tokens=tokens)


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[MultiVectorData | EmbeddingData]
    model: str
    usage: Usage


class ModelCard(BaseModel):
    """One entry of GET /v1/models: OpenAI's fields plus what a client needs to call the model."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "embento"
    modalities: list[str]
    capabilities: list[str]
    backend: str
    dimension: int
    max_input_tokens: int
    multi_vector: bool = False
    sparse: bool = False  # `dimension` is then the vocabulary size
    labels: list[str] | None = None
    quantization: dict | None = Field(None, description="The int8/uint8 coding: its scheme (symmetric or "
                                      "per_dimension), source, and per number of features its scale or "
                                      "[[mins], [maxs]] (the quantization_ranges file format).")


class FailedModel(BaseModel):
    """A configured model that failed to load (served anyway with `allow_partial`): why."""

    id: str
    error: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
    failed: list[FailedModel] = Field(default_factory=list)


@dataclass(frozen=True)
class InputItem:
    modality: Modality
    value: str | list[int]  # a text, a data URI or URL, or token ids


def validated_inputs(
    request: EmbeddingRequest, info: ModelInfo, max_inputs: int, max_media: int, max_chars: int
) -> list[InputItem]:
    """One item per input, with its modality; raises `InvalidRequest` when unusable. Whether the model takes
    those modalities is the caller's check (it knows which models do)."""
    raw = request.input
    if isinstance(raw, str) or (raw and isinstance(raw[0], int)):
        raw = [raw]  # type: ignore[list-item]
    items = [_item(value, request.modality) for value in raw]  # type: ignore[union-attr]
    if not items:
        raise InvalidRequest("input must not be empty", param="input")
    if len(items) > max_inputs:
        raise InvalidRequest(f"input holds {len(items)} items; at most {max_inputs} are allowed", param="input")
    media = sum(item.modality != "text" for item in items)
    if media > max_media:
        raise InvalidRequest(f"input holds {media} images or audio clips; at most {max_media} are allowed",
                             param="input")
    empty = next((i for i, item in enumerate(items) if len(item.value) == 0), None)
    if empty is not None:
        raise InvalidRequest(f"input[{empty}] is empty; every input needs at least one character or token",
                             param="input")
    check_text_lengths([item.value if item.modality == "text" else "" for item in items], max_chars, "input")
    check_instruction_length(request.instruction, max_chars)
    if info.kind not in ("embed", "sparse") and any(isinstance(item.value, list) for item in items):
        raise InvalidRequest(f"model '{info.served_model_name}' takes text, not token ids", param="input")
    _check_dimensions(request.dimensions, info)
    _check_text_controls(request, info)
    return items


def _check_text_controls(request: EmbeddingRequest, info: ModelInfo) -> None:
    """The fields that apply to some kinds of model only."""
    name = info.served_model_name
    as_is = request.normalize is info.normalized  # what the model gives anyway (TEI sends normalize: true)
    if request.normalize is not None and info.kind != "embed" and not as_is:
        raise InvalidRequest(f"normalize applies to dense text embedders; model '{name}' is a {info.kind} model",
                             param="normalize")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise InvalidRequest(f"max_tokens must be at least 1, got {request.max_tokens}", param="max_tokens")
    if request.max_active_dims is not None and not info.sparse:
        raise InvalidRequest(f"max_active_dims applies to sparse models; model '{name}' is dense",
                             param="max_active_dims")
    if request.max_active_dims is not None and request.max_active_dims < 1:
        raise InvalidRequest(f"max_active_dims must be at least 1, got {request.max_active_dims}",
                             param="max_active_dims")
    if request.instruction is not None and info.kind not in ("embed", "sparse"):
        raise InvalidRequest(f"instruction applies to text embedders; model '{name}' is a {info.kind} model",
                             param="instruction")


def check_text_lengths(texts: Sequence[str | list[int]], max_chars: int, param: str) -> None:
    """Texts (token id lists pass) of at most `max_chars` characters each."""
    too_long = next((i for i, text in enumerate(texts) if isinstance(text, str) and len(text) > max_chars), None)
    if too_long is not None:
        raise InvalidRequest(
            f"{param}[{too_long}] has {len(texts[too_long])} characters; at most {max_chars} are allowed", param=param
        )


def check_instruction_length(instruction: str | None, max_chars: int) -> None:
    if instruction is not None and len(instruction) > max_chars:
        raise InvalidRequest(f"instruction has {len(instruction)} characters; at most {max_chars} are allowed",
                             param="instruction")


def _item(value: str | list[int] | TextItem | ImageItem | AudioItem, modality: Modality) -> InputItem:
    if isinstance(value, TextItem):
        return InputItem("text", value.text)
    if isinstance(value, ImageItem):
        return InputItem("image", value.image)
    if isinstance(value, AudioItem):
        return InputItem("audio", value.audio)
    if isinstance(value, list):
        return InputItem("text", value)
    return InputItem(modality, value)


def _check_dimensions(dimensions: int | None, info: ModelInfo) -> None:
    if dimensions is None:
        return
    if info.sparse:
        raise InvalidRequest(f"model '{info.served_model_name}' is sparse: dimensions does not apply (use "
                             "max_active_dims)", param="dimensions")
    if info.multi_vector:
        raise InvalidRequest(f"model '{info.served_model_name}' returns one vector per token; dimensions does not "
                             "apply", param="dimensions")
    if not 1 <= dimensions <= info.dimension:
        raise InvalidRequest(
            f"dimensions must be between 1 and {info.dimension} for model '{info.served_model_name}', "
            f"got {dimensions}",
            param="dimensions",
        )


def embedding_response(embeddings: Embeddings) -> EmbeddingResponse:
    """OpenAI's shape: vectors cut to `dimensions` (re-normalized) and encoded; multi-vectors keep their shape;
    sparse ones are their active entries, the largest `max_active_dims` of them."""
    info, outputs, request = embeddings.info, embeddings.outputs, embeddings.request
    if info.sparse:
        data = [EmbeddingData.model_construct(object="embedding", index=i, embedding=SparseEmbedding.of(
            keep_largest(output, request.max_active_dims))) for i, output in enumerate(outputs)]
    elif info.multi_vector:
        data = [_multi_vector_data(i, output, request.encoding_format) for i, output in enumerate(outputs)]
    else:
        encoded = embeddings.encoded(request.encoding_format, embeddings.vectors())
        data = [EmbeddingData.model_construct(object="embedding", index=i, embedding=v) for i, v in enumerate(encoded)]
    return EmbeddingResponse.model_construct(
        object="list", data=data, model=info.served_model_name, usage=Usage.of(embeddings.tokens)
    )


def _multi_vector_data(index: int, matrix: np.ndarray, encoding_format: str) -> EmbeddingData:
    """One vector per token: a list of vectors, or in base64 the flat buffer and its shape."""
    if encoding_format == "base64":
        return MultiVectorData.model_construct(object="embedding", index=index, embedding=to_base64(matrix),
                                               shape=list(matrix.shape))
    return EmbeddingData.model_construct(object="embedding", index=index, embedding=matrix.tolist())
