"""text-embeddings-inference's API as an adapter: TEI's bodies become internal requests, and the internal
results become TEI's bare answers. `model` is an Embento extension: without it each route takes the first
served model of the kind it needs. Errors on these routes leave in TEI's shape (`gateway.errors`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

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

from gateway.embeddings import Embeddings, Shape
from gateway.engine import Classified
from gateway.schemas import EmbeddingInput, EmbeddingRequest, TokenIds, TruncationControls, one_clear_message
from gateway.scoring import DocumentObject, Ranking, RerankRequest, ranked_labels
from models.base import Activation
from models.errors import InvalidRequest
from models.postprocess import keep_largest
from models.text_tokenizer import Token

# The routes answering in TEI's error shape. `/rerank` is shared with infinity and shapes its own errors.
TEI_PATHS = frozenset({"/", "/embed", "/embed_sparse", "/predict", "/similarity", "/tokenize", "/decode"})
M = TypeVar("M", bound=BaseModel)


class TeiEmbedRequest(TruncationControls):
    """POST /embed."""

    inputs: EmbeddingInput
    normalize: StrictBool = Field(True, description="TEI's default: unit-length vectors.")
    prompt_name: str | None = None
    dimensions: StrictInt | None = None
    model: str | None = Field(None, description="Embento's: a served model; defaults to the first embedder.")

    @field_validator("inputs", mode="wrap")
    @classmethod
    def _one_clear_message(cls, value: object, handler: ValidatorFunctionWrapHandler) -> EmbeddingInput:
        return one_clear_message(value, handler, "inputs")

    def as_embedding_request(self) -> EmbeddingRequest:
        return EmbeddingRequest(input=self.inputs, model=self.model, normalize=self.normalize,
                                prompt_name=self.prompt_name, dimensions=self.dimensions, truncate=self.truncate,
                                truncation_direction=self.truncation_direction)


# What /embed answers: vectors, or per-token vectors; sparse models answer /embed_sparse.
TEI_EMBED_SHAPES: frozenset[Shape] = frozenset({"dense", "multi-vector"})


def embed_answer(embeddings: Embeddings) -> list:
    """A bare list of vectors (of per-token vectors, for multi-vector models)."""
    if embeddings.info.multi_vector:
        return [output.tolist() for output in embeddings.outputs]
    return embeddings.vectors().tolist()


class SparseEmbeddingRequest(TruncationControls):
    """POST /embed_sparse, with Embento's `model`, `instruction` and `max_active_dims`."""

    inputs: StrictStr | list[StrictStr]
    model: str | None = Field(None, description="Served model name; defaults to the first sparse model.")
    prompt_name: str | None = None
    instruction: StrictStr | None = None
    max_active_dims: StrictInt | None = None

    def as_embedding_request(self) -> EmbeddingRequest:
        return EmbeddingRequest(input=self.inputs, model=self.model, prompt_name=self.prompt_name,
                                instruction=self.instruction, max_active_dims=self.max_active_dims,
                                truncate=self.truncate, truncation_direction=self.truncation_direction)


class SparseValue(BaseModel):
    """One entry of /embed_sparse's answer."""

    index: int
    value: float


def sparse_answer(embeddings: Embeddings) -> list[list[SparseValue]]:
    """Per input, its active entries (the largest `max_active_dims`) as `{"index", "value"}`."""
    kept = [keep_largest(output, embeddings.request.max_active_dims) for output in embeddings.outputs]
    return [[SparseValue.model_construct(index=int(i), value=float(v)) for i, v in zip(*entries)] for entries in kept]


class RerankBody(RerankRequest):
    """POST /rerank: infinity's body (`documents`) or TEI's (`texts`, `return_text`), told apart by the body."""

    documents: list[StrictStr | DocumentObject] | None = None  # type: ignore[assignment]
    texts: list[StrictStr] | None = Field(None, description="TEI's documents; the answer is then TEI's.")
    return_text: StrictBool = Field(False, description="TEI's: each result carries its text.")

    def is_tei(self) -> bool:
        """TEI's body (`texts`) or infinity's (`documents`); neither or both is a 400."""
        if self.texts is not None and self.documents is not None:
            raise InvalidRequest("give documents (infinity, Cohere) or texts (TEI), not both", param="texts")
        if self.texts is None and self.documents is None:
            raise InvalidRequest("documents is required", param="documents")
        return tei_rerank_body(vars(self))

    def as_rerank_request(self) -> RerankRequest:
        self.is_tei()  # neither or both is a 400
        fields = self.model_dump(exclude={"texts", "return_text", "documents"})
        documents = self.texts if self.texts is not None else self.documents
        return parsed(RerankRequest, {**fields, "documents": documents})


def tei_rerank_body(body: Mapping[str, Any]) -> bool:
    """Whether a /rerank body is TEI's (`texts`, not infinity's `documents`): it is then answered, errors too, in
    TEI's shapes."""
    return body.get("texts") is not None and body.get("documents") is None


def rerank_answer(ranking: Ranking, return_text: bool) -> list[dict]:
    """TEI's bare list, best first."""
    return [{"index": i, "score": ranking.scores[i], **({"text": ranking.documents[i]} if return_text else {})}
            for i in ranking.order]


class TeiPredictRequest(TruncationControls):
    """POST /predict: a text, a [text, text] pair, or a batch of [text] and [text, text]."""

    inputs: StrictStr | list[StrictStr] | list[list[StrictStr]]
    raw_scores: StrictBool = False
    model: str | None = Field(None, description="Embento's: a served classifier; defaults to the first.")

    def sequences(self) -> tuple[list[str], list[str | None], bool]:
        """(first texts, second texts or None, whether the request was a batch)."""
        raw = self.inputs
        if not raw:
            raise InvalidRequest("inputs must not be empty", param="inputs")
        batch = isinstance(raw[0], list)
        sequences = raw if batch else [[raw] if isinstance(raw, str) else raw]
        for index, sequence in enumerate(sequences):
            if not 1 <= len(sequence) <= 2 or not all(isinstance(text, str) and text for text in sequence):
                raise InvalidRequest(f"inputs[{index}] must be one non-empty text or a pair of them", param="inputs")
        return [s[0] for s in sequences], [s[1] if len(s) == 2 else None for s in sequences], batch  # type: ignore[index]


def label_scores(classified: Classified, top_k: int | None = None) -> list[list[dict]]:
    """Per input, every label (or the `top_k` best) with its score, highest first."""
    rows = ranked_labels(classified.info.labels, classified.scores.tolist())
    return [[item.model_dump() for item in (row[:top_k] if top_k else row)] for row in rows]


class SimilarityInputs(BaseModel):
    source_sentence: StrictStr
    sentences: list[StrictStr]


class SimilarityParameters(TruncationControls):
    prompt_name: str | None = None


class TeiSimilarityRequest(BaseModel):
    """POST /similarity (the Hugging Face sentence-similarity task)."""

    inputs: SimilarityInputs
    parameters: SimilarityParameters | None = None
    model: str | None = None

    def as_embedding_request(self) -> EmbeddingRequest:
        parameters = self.parameters or SimilarityParameters()
        if not self.inputs.sentences:
            raise InvalidRequest("inputs.sentences must not be empty", param="inputs")
        return EmbeddingRequest(input=[self.inputs.source_sentence, *self.inputs.sentences], model=self.model,
                                prompt_name=parameters.prompt_name, truncate=parameters.truncate,
                                truncation_direction=parameters.truncation_direction)


def similarity_answer(embeddings: Embeddings) -> list[float]:
    """The cosine of the source sentence with each other sentence."""
    if embeddings.info.sparse or embeddings.info.multi_vector:
        raise InvalidRequest(f"model '{embeddings.info.served_model_name}' has no single dense vector per text",
                             param="model")
    vectors = embeddings.vectors()
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return (vectors[1:] @ vectors[0]).tolist()


class TeiTokenizeRequest(BaseModel):
    """POST /tokenize."""

    inputs: StrictStr | list[StrictStr]
    add_special_tokens: StrictBool = True
    prompt_name: str | None = None
    model: str | None = None

    def texts(self) -> list[str]:
        return [self.inputs] if isinstance(self.inputs, str) else self.inputs


def tokens_answer(tokens: list[list[Token]]) -> list[list[dict]]:
    return [[{"id": t.id, "text": t.text, "special": t.special, "start": t.start, "stop": t.stop} for t in row]
            for row in tokens]


class TeiDecodeRequest(BaseModel):
    """POST /decode."""

    ids: TokenIds | list[TokenIds]
    skip_special_tokens: StrictBool = True
    model: str | None = None

    def sequences(self) -> list[list[int]]:
        if not self.ids:
            raise InvalidRequest("ids must not be empty", param="ids")
        return self.ids if isinstance(self.ids[0], list) else [self.ids]  # type: ignore[list-item]


class TeiRootRequest(BaseModel):
    """POST /: what `huggingface_hub.InferenceClient(base_url)` sends, or any TEI body."""

    model_config = ConfigDict(extra="allow")
    inputs: Any = None
    parameters: dict[str, Any] | None = None
    model: str | None = None
    query: Any = None
    texts: Any = None

    def body(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)

    def task(self, default_kind: str) -> Literal["rerank", "similarity", "text-classification", "predict",
                                                  "embed_sparse", "embed"]:
        """TEI's root dispatch, told first by the body (one server serves several kinds here): TEI's rerank body,
        the sentence-similarity task's `{source_sentence, sentences}`, the text-classification task's
        `parameters` (`function_to_apply`, `top_k`, or none); otherwise the kind of the model asked for (or the
        first served)."""
        if self.query is not None or self.texts is not None:
            return "rerank"
        if isinstance(self.inputs, dict):
            return "similarity"
        if self.parameters is not None and set(self.parameters) <= {"function_to_apply", "top_k"}:
            return "text-classification"
        return {"classify": "predict", "sparse": "embed_sparse"}.get(default_kind, "embed")  # type: ignore[return-value]


class TextClassificationParameters(BaseModel):
    """The parameters `InferenceClient.text_classification` sends."""

    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None
    top_k: StrictInt | None = None

    def activation(self) -> Activation | None:
        """None: the model's own."""
        return {"none": "identity", "sigmoid": "sigmoid", "softmax": "softmax", None: None}[self.function_to_apply]


def parsed(model: type[M], body: dict[str, Any]) -> M:
    """A sub-request out of the root body; its validation errors as a 400 naming the field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidRequest(f"{where}: {first['msg']}" if where else first["msg"],
                             param=str(first["loc"][0]) if first["loc"] else None) from None
