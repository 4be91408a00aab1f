"""Cohere's API: embed v1 (`POST /v1/embed`) and v2 (`POST /v2/embed`), rerank v1 (`POST /v1/rerank`) and v2
(`POST /v2/rerank`). Each body becomes an internal query and each result Cohere's answer for that version;
errors leave in OpenAI's shape. Jina's rerank is Cohere v1's body and answer plus `model` and `usage`, on the
same route, so it lives here too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    StrictStr,
    field_validator,
    model_serializer,
)
from starlette.responses import Response

from gateway.queries import EmbedQuery, InputItem, InputType, OutputType, mixed_input
from gateway.queue.priority import Prioritized
from gateway.results import Embeddings, Ranking
from gateway.validation.bodies import check_alone, check_has_parts, check_not_empty, check_one_given
from gateway.wire.common import ModeScores, RerankRequest, Usage, json_answer, rank_query, response_id
from models.base import Representation, Truncation
from models.kinds import Output

if TYPE_CHECKING:
    from gateway.engine import Engine

# Cohere's embed answers one dense vector per input: sparse and multi-vector models have no shape here.
EMBED_SHAPES: frozenset[Output] = frozenset({"dense"})
Truncate = Literal["NONE", "START", "END"]


# Embed bodies
class CohereEmbedRequest(Prioritized):
    """POST /v1/embed. Unknown fields are ignored, as Cohere's SDK adds some."""

    texts: list[StrictStr] | None = None
    images: list[StrictStr] | None = Field(None, description="Data URIs, for image models (CLIP).")
    model: str | None = Field(None, description="Served model name; defaults to the first embedder.")
    input_type: InputType | None = Field(None, description="Picks the model's prompt (query:/passage:, ...).")
    embedding_types: list[OutputType] | None = Field(
        None, description="float, int8, uint8 (one scale fixed per model, see GET /v1/models), binary, ubinary, base64."
    )
    truncate: Truncate | None = Field(
        None, description="END (the default) cuts the end, START the start, NONE refuses over-long input."
    )

    @field_validator("embedding_types", mode="before")
    @classmethod
    def _dense_only(cls, value: Any) -> Any:
        """Cohere's embed answers dense vectors; sparse and ColBERT outputs have a route of their own."""
        other = next((t for t in value if t in get_args(Representation)), None) if isinstance(value, list) else None
        if other is not None:
            raise ValueError(
                f"embedding_types answers dense vectors as {list(get_args(OutputType))}; '{other}' "
                "output is answered at /v1/embeddings (output_types)"
            )
        return value

    def items(self) -> tuple[InputItem, ...]:
        given = [name for name in ("texts", "images") if getattr(self, name) is not None]
        check_one_given(given, self._inputs_fields(), "texts")
        if self.images is not None:
            return tuple(InputItem("image", image) for image in self.images)
        return tuple(InputItem("text", text) for text in self.texts or [])

    @staticmethod
    def _inputs_fields() -> str:
        return "texts or images"

    def items_param(self) -> str:
        """The field errors about the inputs name: the one that holds them."""
        return "images" if self.images is not None else "texts"


class ImageUrl(BaseModel):
    url: StrictStr


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: StrictStr


class ImagePart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["image_url"]
    image_url: ImageUrl | StrictStr


class CohereInput(BaseModel):
    content: list[Annotated[TextPart | ImagePart, Field(discriminator="type")]]


class CohereV2EmbedRequest(CohereEmbedRequest):
    """POST /v2/embed."""

    model: str = Field(description="Served model name (required by Cohere v2).")
    inputs: list[CohereInput] | None = Field(
        None,
        description="Content lists: texts and images, in order, one vector per input (several parts: models "
        "that take mixed inputs).",
    )
    output_dimension: StrictInt | None = Field(None, description="Matryoshka: keep the first N features.")
    max_tokens: StrictInt | None = Field(
        None, description="Cut (or with truncate NONE, refuse) input longer than this many tokens."
    )

    @staticmethod
    def _inputs_fields() -> str:
        return "texts, images or inputs"

    def items_param(self) -> str:
        return "inputs" if self.inputs is not None else super().items_param()

    def items(self) -> tuple[InputItem, ...]:
        if self.inputs is None:
            return super().items()
        check_alone(self.texts is not None or self.images is not None, "texts, images or inputs", "inputs")
        return tuple(_content_item(index, item) for index, item in enumerate(self.inputs))


def _content_item(index: int, item: CohereInput) -> InputItem:
    """One input of all its parts, in order: several make a mixed input, which the validation refuses for a
    model that embeds one text or one image per input."""
    check_has_parts(item.content, index, "inputs")
    return mixed_input(tuple(_content_part(part) for part in item.content))


def _content_part(part: TextPart | ImagePart) -> InputItem:
    if isinstance(part, TextPart):
        return InputItem("text", part.text)
    return InputItem("image", part.image_url if isinstance(part.image_url, str) else part.image_url.url)


# Embed: body -> query
def embed_query(body: CohereEmbedRequest, dimensions: int | None = None, max_tokens: int | None = None) -> EmbedQuery:
    """v1's query; v2 adds `dimensions` (its `output_dimension`) and `max_tokens` (`embed_v2_query`)."""
    items = body.items()  # the inputs are checked before the types, as Cohere does
    return EmbedQuery(
        items=items,
        model=body.model,
        input_type=body.input_type,
        output_types=_output_types(body),
        output_param="embedding_types",
        shapes=EMBED_SHAPES,
        items_param=body.items_param(),
        dimensions=dimensions,
        dimensions_param="output_dimension",
        truncation=Truncation(
            enabled=body.truncate != "NONE", side="left" if body.truncate == "START" else "right", max_tokens=max_tokens
        ),
    )


def embed_v2_query(body: CohereV2EmbedRequest) -> EmbedQuery:
    return embed_query(body, body.output_dimension, body.max_tokens)


def _output_types(body: CohereEmbedRequest) -> tuple[OutputType, ...]:
    check_not_empty(body.embedding_types, "embedding_types")
    return tuple(dict.fromkeys(body.embedding_types or ["float"]))


# Embed: result -> answer
def embed_v1_answer(embeddings: Embeddings, by_type: bool) -> dict:
    """v1: a list of float vectors, or by type when the body named `embedding_types`."""
    common = {"id": response_id(), "texts": _texts(embeddings.query), "meta": _embed_meta("1", embeddings)}
    if not by_type:
        return {
            "response_type": "embeddings_floats",
            "embeddings": embeddings.encoded("float", embeddings.vectors()),
            **common,
        }
    return {"response_type": "embeddings_by_type", "embeddings": _by_type(embeddings), **common}


def embed_v2_answer(embeddings: Embeddings) -> dict:
    """v2: always by type (float when `embedding_types` is omitted)."""
    return {
        "response_type": "embeddings_by_type",
        "id": response_id(),
        "embeddings": _by_type(embeddings),
        "texts": _texts(embeddings.query),
        "meta": _embed_meta("2", embeddings),
    }


def _texts(query: EmbedQuery) -> list[str]:
    """Every text sent, the text parts of mixed inputs too, in order."""
    parts = (part for item in query.items for part in item.all_parts)
    return [part.value for part in parts if part.modality == "text" and isinstance(part.value, str)]


def _embed_meta(version: str, embeddings: Embeddings) -> dict:
    images = sum(part.modality == "image" for item in embeddings.query.items for part in item.all_parts)
    return _meta(version, embeddings.tokens, images or None).model_dump(exclude_none=True)


def _by_type(embeddings: Embeddings) -> dict[str, list]:
    vectors = embeddings.vectors()
    return {output_type: embeddings.encoded(output_type, vectors) for output_type in embeddings.query.output_types}


# Rerank: v2's body (v1's is the body every rerank route shares)
class CohereV2RerankRequest(RerankRequest):
    model: str = Field(description="Served model name (required by Cohere v2).")


# Rerank answers: Cohere v1 and Jina's /v1/rerank, Cohere v2's /v2/rerank
class RerankDocument(BaseModel):
    """The document as sent: `{"text": …}`, or Jina's `{"image": …}` for an image document."""

    text: str | None = None
    image: str | None = None

    @model_serializer(mode="wrap")
    def _the_one_given(self, handler: SerializerFunctionWrapHandler) -> dict:
        return {key: value for key, value in handler(self).items() if value is not None}

    @classmethod
    def of(cls, ranking: Ranking, index: int) -> RerankDocument:
        value = ranking.documents[index]
        return cls(image=value) if index in ranking.query.image_documents else cls(text=value)


class RerankResult(ModeScores):
    index: int
    relevance_score: float


class RerankResultWithDocument(RerankResult):
    document: RerankDocument


class ApiVersion(BaseModel):
    version: str


class Tokens(BaseModel):
    input_tokens: int
    output_tokens: int = 0


class BilledUnits(Tokens):
    images: int | None = None


class Meta(BaseModel):
    api_version: ApiVersion
    billed_units: BilledUnits
    tokens: Tokens


class CohereV2RerankResponse(BaseModel):
    id: str
    results: list[RerankResult]
    meta: Meta


class RerankResponse(CohereV2RerankResponse):
    """Cohere v1's shape, plus Jina's `model` and `usage`."""

    results: list[RerankResultWithDocument | RerankResult]
    model: str
    usage: Usage


def _meta(version: str, tokens: int, images: int | None = None) -> Meta:
    """Billed units are the real tokens (and the images sent, if any)."""
    return Meta(
        api_version=ApiVersion(version=version),
        billed_units=BilledUnits(input_tokens=tokens, images=images),
        tokens=Tokens(input_tokens=tokens),
    )


def rerank_v1_answer(ranking: Ranking, return_documents: bool) -> RerankResponse:
    results: list[RerankResultWithDocument | RerankResult] = [
        RerankResultWithDocument(
            index=i,
            relevance_score=ranking.scores[i],
            scores=ranking.scores_of(i),
            document=RerankDocument.of(ranking, i),
        )
        if return_documents
        else RerankResult(index=i, relevance_score=ranking.scores[i], scores=ranking.scores_of(i))
        for i in ranking.order
    ]
    return RerankResponse(
        id=response_id(),
        results=results,
        meta=_meta("1", ranking.tokens),
        model=ranking.model,
        usage=Usage.of(ranking.tokens, ranking.cached_tokens),
    )


def rerank_v2_answer(ranking: Ranking) -> CohereV2RerankResponse:
    results = [
        RerankResult(index=i, relevance_score=ranking.scores[i], scores=ranking.scores_of(i)) for i in ranking.order
    ]
    return CohereV2RerankResponse(id=response_id(), results=results, meta=_meta("2", ranking.tokens))


# The routes
async def embed_v1(engine: Engine, body: CohereEmbedRequest) -> Response:
    embeddings = await engine.embed(embed_query(body))
    return json_answer(embed_v1_answer(embeddings, by_type=body.embedding_types is not None))


async def embed_v2(engine: Engine, body: CohereV2EmbedRequest) -> Response:
    return json_answer(embed_v2_answer(await engine.embed(embed_v2_query(body))))


async def rerank_v1(engine: Engine, body: RerankRequest) -> RerankResponse:
    return rerank_v1_answer(await engine.rank(rank_query(body)), body.return_documents)


async def rerank_v2(engine: Engine, body: CohereV2RerankRequest) -> CohereV2RerankResponse:
    return rerank_v2_answer(await engine.rank(rank_query(body)))
