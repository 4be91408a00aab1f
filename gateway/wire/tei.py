"""text-embeddings-inference's API: TEI's bodies become internal queries, and the results TEI's bare answers.
`model` is an Embento extension: without it each route takes the first served model of the kind it needs.
Errors on these routes leave in TEI's shape (`TEI_PATHS`; on `/rerank`, shared with infinity, when
`gateway.wire.shared_rerank.is_tei_rerank` says the body is TEI's). The root (`/`) re-dispatches to these same
route functions, as TEI's own does to its handlers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from starlette.responses import JSONResponse, Response

from gateway.queries import ClassifyQuery, DecodeQuery, EmbedQuery, InputItem, RankQuery, TokenizeQuery
from gateway.queue.priority import Prioritized
from gateway.results import Classified, Embeddings, Ranking, Tokens
from gateway.validation.bodies import check_not_empty, parsed_body, sequence_texts
from gateway.wire.common import (
    EmbeddingInput,
    RankControls,
    TokenIds,
    TruncationControls,
    as_list,
    input_items,
    json_answer,
    ranked_labels,
    reworded_union,
    token_ids,
)
from models.base import Activation
from models.kinds import KindSpec, Output

if TYPE_CHECKING:
    from gateway.engine import Engine

# The routes answering in TEI's error shape. `/rerank` is shared with infinity: `gateway.wire.shared_rerank`.
TEI_PATHS = frozenset({"/", "/embed", "/embed_sparse", "/predict", "/similarity", "/tokenize", "/decode"})
# What /embed answers: vectors, or per-token vectors; sparse models answer /embed_sparse.
EMBED_SHAPES: frozenset[Output] = frozenset({"dense", "multi-vector"})
SIMILARITY_SHAPES: frozenset[Output] = frozenset({"dense"})  # a cosine needs one vector per text
M = TypeVar("M", bound=BaseModel)


class TeiEmbedRequest(TruncationControls):
    """POST /embed."""

    inputs: EmbeddingInput
    # TEI's default. Models without a normalize control (media models) give unit vectors anyway, which
    # asking for is no error (gateway.validation).
    normalize: StrictBool = Field(True, description="TEI's default: unit-length vectors.")
    prompt_name: str | None = None
    dimensions: StrictInt | None = None
    model: str | None = Field(None, description="Embento's: a served model; defaults to the first embedder.")

    _inputs_message = reworded_union("inputs")


def embed_query(body: TeiEmbedRequest) -> EmbedQuery:
    return EmbedQuery(
        items=input_items(body.inputs),
        items_param="inputs",
        model=body.model,
        shapes=EMBED_SHAPES,
        dimensions=body.dimensions,
        normalize=body.normalize,
        prompt_name=body.prompt_name,
        truncation=body.truncation(),
    )


def embed_answer(embeddings: Embeddings) -> list:
    """A bare list of vectors (of per-token vectors, for multi-vector models), as float32 arrays for
    `json_answer`."""
    if embeddings.info.multi_vector:
        return [np.asarray(output, dtype=np.float32) for output in embeddings.outputs]
    return embeddings.encoded("float", embeddings.vectors())


class SparseEmbeddingRequest(TruncationControls):
    """POST /embed_sparse, with Embento's `model`, `instruction` and `max_active_dims`."""

    inputs: StrictStr | list[StrictStr]
    model: str | None = Field(None, description="Served model name; defaults to the first sparse model.")
    prompt_name: str | None = None
    instruction: StrictStr | None = None
    max_active_dims: StrictInt | None = None


def sparse_query(body: SparseEmbeddingRequest) -> EmbedQuery:
    return EmbedQuery(
        items=tuple(InputItem("text", text) for text in as_list(body.inputs)),
        items_param="inputs",
        model=body.model,
        capability="embed_sparse",
        representations=("sparse",),
        max_active_dims=body.max_active_dims,
        prompt_name=body.prompt_name,
        instruction=body.instruction,
        truncation=body.truncation(),
    )


class SparseValue(BaseModel):
    """One entry of /embed_sparse's answer."""

    index: int
    value: float


def sparse_answer(embeddings: Embeddings) -> list[list[dict]]:
    """Per input, its active entries (the largest `max_active_dims`) as `SparseValue`'s `{"index", "value"}`, the
    weights float32 for `json_answer` (float32's shortest digits, as every vector)."""
    return [
        [{"index": int(i), "value": v} for i, v in zip(entries[0], entries[1].astype(np.float32))]
        for entries in embeddings.sparse_entries()
    ]


class TeiRerankRequest(TruncationControls, RankControls):
    """POST /rerank with `texts` (the shared route hands TEI's fields over: `gateway.wire.shared_rerank`), and the
    root's rerank task. `model`, `top_n` and `instruction` are Embento's."""

    query: StrictStr
    texts: list[StrictStr]
    raw_scores: StrictBool = False
    return_text: StrictBool = False
    model: str | None = None
    top_n: StrictInt | None = None
    instruction: StrictStr | None = None


def rerank_query(body: TeiRerankRequest) -> RankQuery:
    return RankQuery(
        query=body.query,
        documents=tuple(body.texts),
        documents_param="texts",
        model=body.model,
        top_n=body.top_n,
        activation="identity" if body.raw_scores else None,
        instruction=body.instruction,
        truncation=body.truncation(),
        **body.controls(),
    )


def rerank_answer(ranking: Ranking, return_text: bool) -> list[dict]:
    """TEI's bare list, best first."""
    return [
        {
            "index": i,
            "score": ranking.scores[i],
            **({"text": ranking.documents[i]} if return_text else {}),
            **({"scores": ranking.scores_of(i)} if ranking.mode_scores is not None else {}),
        }
        for i in ranking.order
    ]


class TeiPredictRequest(TruncationControls):
    """POST /predict: a text, a [text, text] pair, or a batch of [text] and [text, text]."""

    inputs: StrictStr | list[StrictStr] | list[list[StrictStr]]
    raw_scores: StrictBool = False
    model: str | None = Field(None, description="Embento's: a served classifier; defaults to the first.")

    def is_batch(self) -> bool:
        return bool(self.inputs) and isinstance(self.inputs[0], list)


def predict_query(body: TeiPredictRequest, activation: Activation | None = None) -> ClassifyQuery:
    """Each sequence's first text, and its second where it is a pair; `raw_scores` wins over `activation`."""
    raw = body.inputs
    given = raw if body.is_batch() else [[raw] if isinstance(raw, str) else raw] if raw else []
    sequences: list[list[str]] = []
    for index, sequence in enumerate(given):
        sequences.append(sequence_texts(sequence, index))
    pairs = tuple(s[1] if len(s) == 2 else None for s in sequences)
    return ClassifyQuery(
        texts=tuple(s[0] for s in sequences),
        pairs=pairs,
        model=body.model,
        activation="identity" if body.raw_scores else activation,
        truncation=body.truncation(),
        texts_param="inputs",
    )


def label_scores(classified: Classified, top_k: int | None = None) -> list[list[dict]]:
    """Per input, every label (or the `top_k` best) with its score, highest first."""
    rows = ranked_labels(classified.info.labels, classified.scores.tolist())
    return [[item.model_dump() for item in (row[:top_k] if top_k else row)] for row in rows]


class TextClassificationParameters(BaseModel):
    """The parameters `InferenceClient.text_classification` sends."""

    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None
    top_k: StrictInt | None = None

    def activation(self) -> Activation | None:
        """None: the model's own."""
        return {"none": "identity", "sigmoid": "sigmoid", "softmax": "softmax", None: None}[self.function_to_apply]


class SimilarityInputs(BaseModel):
    source_sentence: StrictStr
    sentences: list[StrictStr]


class SimilarityParameters(TruncationControls):
    prompt_name: str | None = None


class TeiSimilarityRequest(Prioritized):
    """POST /similarity (the Hugging Face sentence-similarity task)."""

    inputs: SimilarityInputs
    parameters: SimilarityParameters | None = None
    model: str | None = None


def similarity_query(body: TeiSimilarityRequest) -> EmbedQuery:
    parameters = body.parameters or SimilarityParameters()
    check_not_empty(body.inputs.sentences, "inputs.sentences", "inputs")
    texts = (body.inputs.source_sentence, *body.inputs.sentences)
    return EmbedQuery(
        items=tuple(InputItem("text", text) for text in texts),
        items_param="inputs",
        item_params=("inputs.source_sentence", *(f"inputs.sentences[{i}]" for i in range(len(body.inputs.sentences)))),
        model=body.model,
        shapes=SIMILARITY_SHAPES,
        prompt_name=parameters.prompt_name,
        truncation=parameters.truncation(),
    )


def similarity_answer(embeddings: Embeddings) -> np.ndarray:
    """The cosine of the source sentence with each other sentence, as float32 for `json_answer`: within [-1, 1],
    where float32's rounding may put a sentence's cosine with itself at 1.0000001."""
    vectors = embeddings.vectors()
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return np.clip(vectors[1:] @ vectors[0], -1.0, 1.0)


class TeiTokenizeRequest(BaseModel):
    """POST /tokenize."""

    inputs: StrictStr | list[StrictStr]
    add_special_tokens: StrictBool = True
    prompt_name: str | None = None
    model: str | None = None


def tokenize_query(body: TeiTokenizeRequest) -> TokenizeQuery:
    return TokenizeQuery(
        texts=tuple(as_list(body.inputs)),
        model=body.model,
        prompt_name=body.prompt_name,
        add_special_tokens=body.add_special_tokens,
        texts_param="inputs",
    )


def tokens_answer(tokens: Tokens) -> list[list[dict]]:
    return [
        [{"id": t.id, "text": t.text, "special": t.special, "start": t.start, "stop": t.stop} for t in row]
        for row in tokens.tokens
    ]


class TeiDecodeRequest(BaseModel):
    """POST /decode."""

    ids: TokenIds | list[TokenIds]
    skip_special_tokens: StrictBool = True
    model: str | None = None


def decode_query(body: TeiDecodeRequest) -> DecodeQuery:
    ids = body.ids
    sequences = [ids] if token_ids(ids) else ids
    return DecodeQuery(
        ids=tuple(tuple(sequence) for sequence in sequences),
        model=body.model,
        skip_special_tokens=body.skip_special_tokens,
    )


# The routes
async def embed(engine: Engine, body: TeiEmbedRequest) -> Response:
    return json_answer(embed_answer(await engine.embed(embed_query(body))))


async def embed_sparse(engine: Engine, body: SparseEmbeddingRequest) -> Response:
    return json_answer(sparse_answer(await engine.embed(sparse_query(body))))


async def rerank(engine: Engine, body: TeiRerankRequest) -> JSONResponse:
    """As is: the shared /rerank route declares infinity's answer."""
    return JSONResponse(rerank_answer(await engine.rank(rerank_query(body)), body.return_text))


async def predict(engine: Engine, body: TeiPredictRequest) -> list:
    answers = label_scores(await engine.classify(predict_query(body)))
    return answers if body.is_batch() else answers[0]


async def similarity(engine: Engine, body: TeiSimilarityRequest) -> Response:
    return json_answer(similarity_answer(await engine.embed(similarity_query(body))))


async def tokenize(engine: Engine, body: TeiTokenizeRequest) -> list[list[dict]]:
    return tokens_answer(await engine.tokenize(tokenize_query(body)))


async def decode(engine: Engine, body: TeiDecodeRequest) -> list[str]:
    return await engine.decode(decode_query(body))


# The root
class TeiRootRequest(BaseModel):
    """POST /: what `huggingface_hub.InferenceClient(base_url)` sends, or any TEI body."""

    model_config = ConfigDict(extra="allow")
    inputs: Any = None
    parameters: dict[str, Any] | None = None
    model: str | None = None
    query: Any = None
    texts: Any = None


RootTask = Literal["rerank", "similarity", "text-classification", "predict", "embed_sparse", "embed"]


def root_task(body: TeiRootRequest, default: KindSpec | None) -> RootTask:
    """TEI's root dispatch, told first by the body (one server serves several kinds here): TEI's rerank body,
    the sentence-similarity task's `{source_sentence, sentences}`, the text-classification task's
    `parameters` (`function_to_apply`, `top_k`, or none); otherwise by the kind of the model asked for (or
    the first served)."""
    if body.query is not None or body.texts is not None:
        return "rerank"
    if isinstance(body.inputs, dict):
        return "similarity"
    if body.parameters is not None and set(body.parameters) <= {"function_to_apply", "top_k"}:
        return "text-classification"
    return tei_root_task(default) if default is not None else "embed"


def tei_root_task(kind: KindSpec) -> RootTask:
    """TEI's root dispatch for a model of this kind when the body does not tell: by its main capability."""
    main = kind.capabilities[0]
    if main == "embed_sparse":
        return "embed_sparse"
    return "predict" if main == "classify" else "embed"


def tei_model_type(kind: KindSpec) -> Literal["embedding", "reranker", "classifier"]:
    """TEI's /info `model_type` for a model of this kind: by its main capability."""
    main = kind.capabilities[0]
    if main == "rerank":
        return "reranker"
    return "classifier" if main == "classify" else "embedding"


async def text_classification(engine: Engine, fields: dict[str, Any]) -> list[list[dict]]:
    """The task's answer: per input, its labels (the `top_k` best) under the asked activation."""
    parameters = parsed(TextClassificationParameters, fields.pop("parameters") or {})
    query = predict_query(parsed(TeiPredictRequest, fields), parameters.activation())
    return label_scores(await engine.classify(query), parameters.top_k)


def _route(
    body_model: type[M], route: Callable[[Engine, M], Awaitable[Any]]
) -> Callable[[Engine, dict[str, Any]], Awaitable[Any]]:
    return lambda engine, fields: route(engine, parsed(body_model, fields))


ROOT_ROUTES: dict[RootTask, Callable[[Engine, dict[str, Any]], Awaitable[Any]]] = {
    "rerank": _route(TeiRerankRequest, rerank),
    "similarity": _route(TeiSimilarityRequest, similarity),
    "text-classification": text_classification,
    "predict": _route(TeiPredictRequest, predict),
    "embed_sparse": _route(SparseEmbeddingRequest, embed_sparse),
    "embed": _route(TeiEmbedRequest, embed),
}


async def root(engine: Engine, body: TeiRootRequest) -> Any:
    task = root_task(body, engine.kind_spec(body.model))
    return await ROOT_ROUTES[task](engine, body.model_dump(exclude_unset=True))


def parsed(model: type[M], body: dict[str, Any]) -> M:
    """A route's body out of the root body; its validation errors as a 400 naming the field."""
    return parsed_body(model, body)
