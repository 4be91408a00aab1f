"""Typed wire formats (OpenAI's, with infinity's and TEI's extensions) and the request-validation layer."""

from __future__ import annotations

from typing import Literal, Union

from pydantic import (
    BaseModel,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from models.base import ModelInfo
from models.errors import InvalidRequest

TokenIds = list[StrictInt]
EmbeddingInput = Union[StrictStr, list[StrictStr], TokenIds, list[TokenIds]]


class EmbeddingRequest(BaseModel):
    """POST /v1/embeddings. Unknown fields are ignored, as OpenAI SDK extras may add some."""

    input: EmbeddingInput = Field(description="A string, a list of strings, token ids, or lists of token ids.")
    model: str | None = Field(None, description="Served model name; defaults to the first configured model.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = Field(None, description="Matryoshka: keep the first N features, re-normalized.")
    user: str | None = Field(None, description="Accepted and ignored.")
    modality: Literal["text"] = Field("text", description="infinity's field; only text is served so far.")
    prompt_name: str | None = Field(None, description="A named prompt of the model (e.g. 'query').")

    @field_validator("input", mode="wrap")
    @classmethod
    def _one_clear_message(cls, value: object, handler: ValidatorFunctionWrapHandler) -> EmbeddingInput:
        try:
            return handler(value)
        except ValidationError:  # the union's per-branch errors help nobody
            raise ValueError(
                "input must be a string, a list of strings, a list of token ids, or a list of token-id lists"
            ) from None


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, tokens: int) -> Usage:
        return cls(prompt_tokens=tokens, total_tokens=tokens)


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: Usage


class ModelCard(BaseModel):
    """One entry of GET /v1/models: OpenAI's fields plus what a client needs to call the model."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "embento"
    modality: str
    capabilities: list[str]
    backend: str
    dimension: int
    max_input_tokens: int
    labels: list[str] | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


def validated_inputs(request: EmbeddingRequest, info: ModelInfo, max_inputs: int) -> list[str] | list[list[int]]:
    """The inputs as a list of texts or a list of token-id lists; raises `InvalidRequest` when unusable."""
    raw = request.input
    if isinstance(raw, str):
        inputs: list = [raw]
    elif raw and isinstance(raw[0], int):
        inputs = [raw]
    else:
        inputs = list(raw)
    if not inputs:
        raise InvalidRequest("input must not be empty", param="input")
    if len(inputs) > max_inputs:
        raise InvalidRequest(f"input holds {len(inputs)} items; at most {max_inputs} are allowed", param="input")
    empty = next((i for i, item in enumerate(inputs) if len(item) == 0), None)
    if empty is not None:
        raise InvalidRequest(f"input[{empty}] is empty; every input needs at least one character or token",
                             param="input")
    if request.dimensions is not None and not 1 <= request.dimensions <= info.dimension:
        raise InvalidRequest(
            f"dimensions must be between 1 and {info.dimension} for model '{info.served_model_name}', "
            f"got {request.dimensions}",
            param="dimensions",
        )
    return inputs
