"""The internal rerank request and ranking, infinity's rerank and classify shapes, and their validation.

One rerank request model serves infinity's `/rerank`, Cohere v1 / Jina's `/v1/rerank` and Cohere v2's
`/v2/rerank` (documents may be strings or `{"text": ...}` objects on all three); each route answers in
its own client's shape (Cohere's and Jina's in `gateway.cohere`, TEI's in `gateway.tei`). Classify follows
infinity's `/classify`, with `raw_scores` honoured.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Literal

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

from gateway.schemas import TruncationControls, Usage, check_instruction_length, check_text_lengths
from models.errors import InvalidRequest


class DocumentObject(BaseModel):
    """Cohere v1 / Jina's document object: `text` is ranked, other fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    text: StrictStr


class RerankRequest(TruncationControls):
    model: str | None = Field(None, description="Served model name; defaults to the first reranker.")
    query: StrictStr
    documents: list[StrictStr | DocumentObject]
    top_n: StrictInt | None = Field(None, description="Return the best N; all when omitted.")
    return_documents: StrictBool = False
    raw_scores: StrictBool = Field(False, description="Logits instead of the model's activation.")
    instruction: StrictStr | None = Field(None, description="For causal-LM rerankers whose chat template takes "
                                          "one (Qwen3-Reranker's `<Instruct>`); the template's default otherwise.")

    @field_validator("documents", mode="wrap")
    @classmethod
    def _one_clear_message(cls, value: object, handler: ValidatorFunctionWrapHandler) -> list[str | DocumentObject]:
        try:
            return handler(value)
        except ValidationError as exc:  # the union's per-branch errors help nobody
            where = next((f"documents[{e['loc'][0]}]" for e in exc.errors() if e["loc"]), "documents")
            raise ValueError(f"{where} must be a string or an object with a string 'text' field") from None


def validated_documents(request: RerankRequest, max_documents: int, max_chars: int, text_documents: bool) -> list[str]:
    """The documents as strings. `max_chars` bounds the query, and the documents when they are texts (not
    images, which `max_item_bytes` bounds)."""
    if not request.query:
        raise InvalidRequest("query must not be empty", param="query")
    if len(request.query) > max_chars:
        raise InvalidRequest(f"query has {len(request.query)} characters; at most {max_chars} are allowed",
                             param="query")
    check_instruction_length(request.instruction, max_chars)
    if not request.documents:
        raise InvalidRequest("documents must not be empty", param="documents")
    if len(request.documents) > max_documents:
        raise InvalidRequest(
            f"documents holds {len(request.documents)} items; at most {max_documents} are allowed", param="documents"
        )
    if request.top_n is not None and request.top_n < 1:
        raise InvalidRequest(f"top_n must be at least 1, got {request.top_n}", param="top_n")
    documents = [d if isinstance(d, str) else d.text for d in request.documents]
    if text_documents:
        check_text_lengths(documents, max_chars, "documents")
    return documents


@dataclass(frozen=True)
class Ranking:
    """What every rerank route answers from: scores by document, best first, and the tokens spent."""

    model: str
    order: list[int]
    scores: list[float]
    documents: list[str]
    tokens: int


def response_id() -> str:
    return f"embento-{uuid.uuid4()}"


# infinity's /rerank
class InfinityRerankResult(BaseModel):
    relevance_score: float
    index: int
    document: str | None = None


class InfinityRerankResponse(BaseModel):
    object: Literal["rerank"] = "rerank"
    results: list[InfinityRerankResult]
    model: str
    usage: Usage
    id: str
    created: int


def infinity_rerank_response(ranking: Ranking, return_documents: bool) -> InfinityRerankResponse:
    results = [
        InfinityRerankResult(relevance_score=ranking.scores[i], index=i,
                             document=ranking.documents[i] if return_documents else None)
        for i in ranking.order
    ]
    return InfinityRerankResponse(results=results, model=ranking.model, usage=Usage.of(ranking.tokens),
                                  id=response_id(), created=int(time.time()))


# infinity's /classify
class ClassifyRequest(TruncationControls):
    model: str | None = Field(None, description="Served model name; defaults to the first classifier.")
    input: StrictStr | list[StrictStr]
    raw_scores: StrictBool = Field(False, description="Logits instead of softmax (or sigmoid) probabilities.")


def validated_texts(request: ClassifyRequest, max_inputs: int, max_chars: int) -> list[str]:
    return checked_texts([request.input] if isinstance(request.input, str) else list(request.input), max_inputs,
                         max_chars, "input")


def checked_texts(texts: list[str], max_inputs: int, max_chars: int, param: str) -> list[str]:
    """Texts to score or tokenize: some, not too many, none empty or too long."""
    if not texts:
        raise InvalidRequest(f"{param} must not be empty", param=param)
    if len(texts) > max_inputs:
        raise InvalidRequest(f"{param} holds {len(texts)} items; at most {max_inputs} are allowed", param=param)
    empty = next((i for i, text in enumerate(texts) if not text), None)
    if empty is not None:
        raise InvalidRequest(f"{param}[{empty}] is empty", param=param)
    check_text_lengths(texts, max_chars, param)
    return texts


class LabelScore(BaseModel):
    label: str
    score: float


class ClassifyResponse(BaseModel):
    object: Literal["classify"] = "classify"
    data: list[list[LabelScore]]
    model: str
    usage: Usage
    id: str
    created: int


def ranked_labels(labels: list[str], scores: list[list[float]]) -> list[list[LabelScore]]:
    """Every label per input, highest score first (as infinity and TEI order them)."""
    return [sorted((LabelScore(label=label, score=score) for label, score in zip(labels, row)),
                   key=lambda item: -item.score) for row in scores]


def classify_response(model: str, labels: list[str], scores: list[list[float]], tokens: int) -> ClassifyResponse:
    return ClassifyResponse(data=ranked_labels(labels, scores), model=model, usage=Usage.of(tokens), id=response_id(),
                            created=int(time.time()))
