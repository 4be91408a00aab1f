"""Cohere's API as an adapter. Embed, v1 (`POST /v1/embed`) and v2 (`POST /v2/embed`): each body becomes one
internal `EmbeddingRequest`, and the internal `Embeddings` become Cohere's response for that version. Rerank,
v1 (with Jina's `model` and `usage`, `POST /v1/rerank`) and v2: the internal `Ranking` in Cohere's shapes."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from gateway.embeddings import Embeddings, OutputType, Shape
from gateway.schemas import EmbeddingRequest, ImageItem, InputType, TextItem, Usage
from gateway.scoring import Ranking, RerankRequest, response_id
from models.errors import InvalidRequest

# Cohere's embed answers one dense vector per input: sparse and multi-vector models have no shape here.
COHERE_EMBED_SHAPES: frozenset[Shape] = frozenset({"dense"})

Truncate = Literal["NONE", "START", "END"]


class CohereEmbedRequest(BaseModel):
    """POST /v1/embed. Unknown fields are ignored, as Cohere's SDK adds some."""

    texts: list[StrictStr] | None = None
    images: list[StrictStr] | None = Field(None, description="Data URIs, for image models (CLIP).")
    model: str | None = Field(None, description="Served model name; defaults to the first embedder.")
    input_type: InputType | None = Field(None, description="Picks the model's prompt (query:/passage:, ...).")
    embedding_types: list[OutputType] | None = Field(
        None, description="float, int8, uint8 (one scale fixed per model, see GET /v1/models), binary, ubinary, "
        "base64.")
    truncate: Truncate | None = Field(None, description="END (the default) cuts the end, START the start, NONE "
                                      "refuses over-long input.")

    def parts(self) -> list[StrictStr | TextItem | ImageItem]:
        given = [name for name in ("texts", "images") if getattr(self, name) is not None]
        if len(given) != 1:
            raise InvalidRequest(f"give exactly one of {self._inputs_fields()}; got {given or 'none'}",
                                 param=given[1] if len(given) > 1 else "texts")
        if self.images is not None:
            return [ImageItem(image=image) for image in self.images]
        return list(self.texts or [])

    @staticmethod
    def _inputs_fields() -> str:
        return "texts or images"

    def as_embedding_request(self) -> EmbeddingRequest:
        return EmbeddingRequest(input=self.parts(), model=self.model, input_type=self.input_type,
                                truncate=self.truncate != "NONE",
                                truncation_direction="left" if self.truncate == "START" else "right")

    def output_types(self) -> list[OutputType]:
        if self.embedding_types is not None and not self.embedding_types:
            raise InvalidRequest("embedding_types must not be empty", param="embedding_types")
        return list(dict.fromkeys(self.embedding_types or ["float"]))


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
    content: list[Annotated[Union[TextPart, ImagePart], Field(discriminator="type")]]


class CohereV2EmbedRequest(CohereEmbedRequest):
    """POST /v2/embed."""

    model: str = Field(description="Served model name (required by Cohere v2).")
    inputs: list[CohereInput] | None = Field(None, description="Content lists; one text or image part each.")
    output_dimension: StrictInt | None = Field(None, description="Matryoshka: keep the first N features.")
    max_tokens: StrictInt | None = Field(None, description="Cut (or with truncate NONE, refuse) input longer than "
                                         "this many tokens.")
    priority: StrictInt | None = Field(None, description="Accepted and ignored.")

    @staticmethod
    def _inputs_fields() -> str:
        return "texts, images or inputs"

    def as_embedding_request(self) -> EmbeddingRequest:
        return super().as_embedding_request().model_copy(
            update={"dimensions": self.output_dimension, "max_tokens": self.max_tokens})

    def parts(self) -> list[StrictStr | TextItem | ImageItem]:
        if self.inputs is None:
            return super().parts()
        if self.texts is not None or self.images is not None:
            raise InvalidRequest("give exactly one of texts, images or inputs", param="inputs")
        parts: list[StrictStr | TextItem | ImageItem] = []
        for index, item in enumerate(self.inputs):
            if len(item.content) != 1:
                raise InvalidRequest(f"inputs[{index}] has {len(item.content)} content parts; these models embed "
                                     "one text or one image per input: send the parts as separate inputs",
                                     param="inputs")
            part = item.content[0]
            if isinstance(part, TextPart):
                parts.append(TextItem(text=part.text))
            else:
                parts.append(ImageItem(image=part.image_url if isinstance(part.image_url, str) else part.image_url.url))
        return parts


def _embed_meta(version: str, embeddings: Embeddings) -> dict:
    images = sum(isinstance(part, ImageItem) for part in embeddings.request.input)  # type: ignore[union-attr]
    return _meta(version, embeddings.tokens, images or None).model_dump(exclude_none=True)


def _texts(embeddings: Embeddings) -> list[str]:
    return [p if isinstance(p, str) else p.text for p in embeddings.request.input if isinstance(p, str | TextItem)]  # type: ignore[union-attr]


def _by_type(embeddings: Embeddings, output_types: list[OutputType]) -> dict[str, list]:
    vectors = embeddings.vectors()
    return {output_type: embeddings.encoded(output_type, vectors) for output_type in output_types}


def cohere_v1_response(embeddings: Embeddings, request: CohereEmbedRequest) -> dict:
    """v1: a list of float vectors unless `embedding_types` was given, then by type."""
    common = {"id": response_id(), "texts": _texts(embeddings), "meta": _embed_meta("1", embeddings)}
    if request.embedding_types is None:
        return {"response_type": "embeddings_floats", "embeddings": embeddings.vectors().tolist(), **common}
    return {"response_type": "embeddings_by_type", "embeddings": _by_type(embeddings, request.output_types()),
            **common}


def cohere_v2_response(embeddings: Embeddings, request: CohereV2EmbedRequest) -> dict:
    """v2: always by type (float when `embedding_types` is omitted)."""
    return {"response_type": "embeddings_by_type", "id": response_id(),
            "embeddings": _by_type(embeddings, request.output_types()), "texts": _texts(embeddings),
            "meta": _embed_meta("2", embeddings)}


class CohereV2RerankRequest(RerankRequest):
    model: str = Field(description="Served model name (required by Cohere v2).")


# Cohere v1 / Jina's /v1/rerank and Cohere v2's /v2/rerank
class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
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
    return Meta(api_version=ApiVersion(version=version), billed_units=BilledUnits(input_tokens=tokens, images=images),
                tokens=Tokens(input_tokens=tokens))


def rerank_response(ranking: Ranking, return_documents: bool) -> RerankResponse:
    results: list[RerankResultWithDocument | RerankResult] = [
        RerankResultWithDocument(index=i, relevance_score=ranking.scores[i],
                                 document=RerankDocument(text=ranking.documents[i]))
        if return_documents else RerankResult(index=i, relevance_score=ranking.scores[i])
        for i in ranking.order
    ]
    return RerankResponse(id=response_id(), results=results, meta=_meta("1", ranking.tokens), model=ranking.model,
                          usage=Usage.of(ranking.tokens))


def cohere_v2_rerank_response(ranking: Ranking) -> CohereV2RerankResponse:
    results = [RerankResult(index=i, relevance_score=ranking.scores[i]) for i in ranking.order]
    return CohereV2RerankResponse(id=response_id(), results=results, meta=_meta("2", ranking.tokens))
