"""infinity's API: its legacy media routes (`/embeddings_image`, `/embeddings_audio`, answered in OpenAI's
shape as infinity does), `/rerank` with `documents` (the route is shared with TEI: `gateway.wire.shared_rerank`
hands infinity's fields here) and `/classify` (also at `/v1/classify`), with `raw_scores` honoured. infinity's
`/embeddings` is OpenAI's."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, StrictBool, StrictStr
from starlette.responses import Response

from gateway.queries import ClassifyQuery, EmbedQuery
from gateway.queue.priority import Prioritized
from gateway.results import Classified, Ranking
from gateway.wire.common import (
    LabelScore,
    ModeScores,
    RerankRequest,
    TruncationControls,
    Usage,
    as_list,
    input_items,
    rank_query,
    ranked_labels,
    response_id,
)

# infinity's embedding answers are OpenAI's shape, so its media routes answer with OpenAI's response.
from gateway.wire.openai import embedding_answer
from models.base import Modality

if TYPE_CHECKING:
    from gateway.engine import Engine


# POST /embeddings_image and /embeddings_audio (deprecated by infinity)
class LegacyMediaRequest(Prioritized):
    """`input`: data URIs or http(s) URLs."""

    input: StrictStr | list[StrictStr]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None


def media_query(body: LegacyMediaRequest, modality: Modality) -> EmbedQuery:
    return EmbedQuery(items=input_items(body.input, modality), model=body.model, output_types=(body.encoding_format,))


async def embed_images(engine: Engine, body: LegacyMediaRequest) -> Response:
    return embedding_answer(await engine.embed(media_query(body, "image")))


async def embed_audio(engine: Engine, body: LegacyMediaRequest) -> Response:
    return embedding_answer(await engine.embed(media_query(body, "audio")))


# POST /rerank with `documents` (infinity's body is the shared RerankRequest)
class InfinityRerankResult(ModeScores):
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


def rerank_response(ranking: Ranking, return_documents: bool) -> InfinityRerankResponse:
    results = [
        InfinityRerankResult(
            relevance_score=ranking.scores[i],
            index=i,
            document=ranking.documents[i] if return_documents else None,
            scores=ranking.scores_of(i),
        )
        for i in ranking.order
    ]
    return InfinityRerankResponse(
        results=results,
        model=ranking.model,
        usage=Usage.of(ranking.tokens, ranking.cached_tokens),
        id=response_id(),
        created=int(time.time()),
    )


async def rerank(engine: Engine, body: RerankRequest) -> InfinityRerankResponse:
    return rerank_response(await engine.rank(rank_query(body)), body.return_documents)


# POST /classify and /v1/classify
class ClassifyRequest(TruncationControls):
    model: str | None = Field(None, description="Served model name; defaults to the first classifier.")
    input: StrictStr | list[StrictStr]
    raw_scores: StrictBool = Field(False, description="Logits instead of softmax (or sigmoid) probabilities.")


def classify_query(body: ClassifyRequest) -> ClassifyQuery:
    return ClassifyQuery(
        texts=tuple(as_list(body.input)),
        model=body.model,
        activation="identity" if body.raw_scores else None,
        truncation=body.truncation(),
    )


class ClassifyResponse(BaseModel):
    object: Literal["classify"] = "classify"
    data: list[list[LabelScore]]
    model: str
    usage: Usage
    id: str
    created: int


def classify_response(classified: Classified) -> ClassifyResponse:
    info = classified.info
    return ClassifyResponse(
        data=ranked_labels(info.labels, classified.scores.tolist()),
        model=classified.model,
        usage=Usage.of(classified.tokens, classified.cached_tokens),
        id=response_id(),
        created=int(time.time()),
    )


async def classify(engine: Engine, body: ClassifyRequest) -> ClassifyResponse:
    return classify_response(await engine.classify(classify_query(body)))
