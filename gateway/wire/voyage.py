"""Voyage's routes, as `voyageai.Client(base_url=…)` calls them. Contextualized embeddings
(`POST /v1/contextualizedembeddings`, `contextualized_embed`): each inner list of `inputs` is one document's
chunks, embedded in the context of the whole document (late chunking); with `enable_auto_chunking`, one string per
document, cut by the server, each chunk's `text` returned. `input_type: "query"` embeds one-element lists as plain
queries. Multimodal embeddings (`POST /v1/multimodalembeddings`, `multimodal_embed`): each input's content parts
(texts and images, in order) are one input, one vector (`gateway.queries.mixed_input`). Errors leave in Voyage's
`{"detail": ...}` (`gateway.http.errors.ERROR_SHAPES`)."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from starlette.responses import Response

from gateway.queries import AutoChunking, ContextQuery, EmbedQuery, InputItem, mixed_input
from gateway.queue.priority import Prioritized
from gateway.results import ContextEmbeddings, Embeddings
from gateway.validation import check_one_text_each
from gateway.validation.bodies import check_chunking_fields
from gateway.wire.common import SHORT_INPUT_TYPES, json_answer
from models.base import Truncation
from models.postprocess import to_base64

if TYPE_CHECKING:
    from gateway.engine import Engine

VOYAGE_PATH = "/v1/contextualizedembeddings"
MULTIMODAL_PATH = "/v1/multimodalembeddings"
VOYAGE_PATHS = (VOYAGE_PATH, MULTIMODAL_PATH)  # their errors leave in Voyage's shape
VoyageDtype = Literal["float", "int8", "uint8", "binary", "ubinary"]


class ContextualizedRequest(Prioritized):
    """POST /v1/contextualizedembeddings. Unknown fields are ignored, as the SDK may add some."""

    inputs: list[list[StrictStr]] | list[StrictStr] = Field(
        description=(
            "Each document's chunks, in order; with enable_auto_chunking one string per document. A flat list of "
            "strings is one-element lists (queries, or documents to cut)."
        )
    )
    model: str | None = Field(None, description="Served model name; defaults to the first text embedder.")
    input_type: Literal["query", "document"] | None = Field(
        None,
        description=(
            "query: one-element lists embedded as plain queries (the model's query prompt); document: the model's "
            "document prompt, if any, before each document."
        ),
    )
    output_dimension: StrictInt | None = Field(None, description="Matryoshka: the first N features.")
    output_dtype: VoyageDtype | None = Field(
        None,
        description="float (the default), or Embento's int8/uint8 "
        "codes (scale fixed per model), binary/ubinary packed sign bits.",
    )
    encoding_format: Literal["base64"] | None = Field(
        None,
        description=(
            "base64 (the SDK's default): each embedding as the little-endian bytes of its dtype (float32, int8 or "
            "uint8), base64-encoded; unset: JSON numbers."
        ),
    )
    enable_auto_chunking: StrictBool = Field(
        False,
        description="Cut each document (one string) into chunks of "
        "chunk_size tokens at whitespace; each chunk's text comes back.",
    )
    chunk_size: StrictInt | None = Field(
        None, description="Auto-chunking: tokens per chunk. Unset: the model's window less its special tokens."
    )
    chunk_overlap: StrictInt | None = Field(None, description="Auto-chunking: tokens neighbours share; 0 unset.")


class ChunkEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    embedding: str | list[float] | list[int]  # str: base64
    index: int
    text: str | None = None


class DocumentEmbeddings(BaseModel):
    object: Literal["list"] = "list"
    data: list[ChunkEmbedding]
    index: int


class VoyageUsage(BaseModel):
    total_tokens: int


class ContextualizedResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[DocumentEmbeddings]
    model: str
    usage: VoyageUsage


def _embed_query(body: ContextualizedRequest, items: tuple[InputItem, ...]) -> EmbedQuery:
    input_type = SHORT_INPUT_TYPES[body.input_type] if body.input_type else None
    return EmbedQuery(
        items=items,
        model=body.model,
        output_types=(body.output_dtype or "float",),
        output_param="output_dtype",
        shapes=frozenset({"dense"}),
        dimensions=body.output_dimension,
        dimensions_param="output_dimension",
        input_type=input_type,
        items_param="inputs",
    )


def _documents(body: ContextualizedRequest) -> list[list[str]]:
    return [[document] if isinstance(document, str) else document for document in body.inputs]


def context_query(body: ContextualizedRequest) -> ContextQuery:
    documents = _documents(body)
    items = tuple(InputItem("text", chunk) for document in documents for chunk in document)
    check_chunking_fields(body.enable_auto_chunking, body.chunk_size, body.chunk_overlap)
    chunking = None
    if body.enable_auto_chunking:
        chunking = AutoChunking(body.chunk_size, body.chunk_overlap or 0)
    return ContextQuery(_embed_query(body, items), tuple(len(document) for document in documents), chunking)


def _encoded(embeddings: Embeddings, in_base64: bool) -> list:
    """Each vector in the query's dtype: its float32 (or codes) array for `json_answer`, which writes float32's
    shortest digits as every route does; or base64 of its little-endian bytes."""
    dtype, vectors = embeddings.query.output_types[0], embeddings.vectors()
    if not in_base64:
        return embeddings.encoded(dtype, vectors)
    if dtype == "float":
        return [to_base64(vector) for vector in vectors]
    assert dtype != "base64"  # not one of Voyage's dtypes
    return [base64.b64encode(codes.tobytes()).decode("ascii") for codes in embeddings.codes(dtype, vectors)]


def _answer(embeddings: Embeddings, documents: list[range], texts: list[str] | None, in_base64: bool) -> Response:
    """`ContextualizedResponse`, written straight from the arrays."""
    encoded = _encoded(embeddings, in_base64)
    data = [
        {
            "object": "list",
            "data": [
                {
                    "object": "embedding",
                    "embedding": encoded[at],
                    "index": j,
                    "text": None if texts is None else texts[at],
                }
                for j, at in enumerate(positions)
            ],
            "index": i,
        }
        for i, positions in enumerate(documents)
    ]
    usage = VoyageUsage(total_tokens=embeddings.tokens).model_dump()
    return json_answer({"object": "list", "data": data, "model": embeddings.model, "usage": usage})


async def contextualized(engine: Engine, body: ContextualizedRequest) -> Response:
    in_base64 = body.encoding_format == "base64"
    if body.input_type == "query" and not body.enable_auto_chunking:
        documents = _documents(body)
        rule = "with input_type query each inner list is one query"
        check_one_text_each([len(document) for document in documents], "inputs", rule)
        items = tuple(InputItem("text", document[0]) for document in documents)
        embeddings = await engine.embed(_embed_query(body, items))
        return _answer(embeddings, [range(i, i + 1) for i in range(len(items))], None, in_base64)
    result: ContextEmbeddings = await engine.embed_in_context(context_query(body))
    return _answer(result.embeddings, result.by_document(), result.texts, in_base64)


# Multimodal embeddings: the content parts Voyage's API and `voyageai`'s `MultimodalInputRequest` send
class TextSegment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: StrictStr


class ImageUrlSegment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["image_url"]
    image_url: StrictStr = Field(description="An http(s) URL (with allow_url_inputs).")


class ImageBase64Segment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["image_base64"]
    image_base64: StrictStr = Field(description="A data URI, data:image/<format>;base64,<data> (the SDK's WebP).")


Segment = Annotated[TextSegment | ImageUrlSegment | ImageBase64Segment, Field(discriminator="type")]


class MultimodalInput(BaseModel):
    content: list[Segment] = Field(min_length=1, description="Texts and images, in order: one input, one vector.")


class MultimodalRequest(Prioritized):
    """POST /v1/multimodalembeddings. Unknown fields are ignored, as the SDK may add some."""

    inputs: list[MultimodalInput] = Field(description="Each input's content parts; one vector per input.")
    model: str | None = Field(None, description="Served model name; defaults to the first embedder.")
    input_type: Literal["query", "document"] | None = Field(
        None, description="The model's query or document prompt (its search_query / search_document), if any."
    )
    truncation: StrictBool = Field(True, description="Cut text past the model's window; false refuses it (400).")
    output_dimension: StrictInt | None = Field(None, description="Matryoshka: the first N features.")
    output_dtype: VoyageDtype | None = Field(None, description="As on /v1/contextualizedembeddings.")
    output_encoding: Literal["base64"] | None = Field(
        None, description="Voyage's API name: base64 of each embedding's little-endian bytes; unset: JSON numbers."
    )
    encoding_format: Literal["base64"] | None = Field(
        None, description="The same, under the name the voyageai SDK sends (base64, which it decodes)."
    )


def _part(segment: TextSegment | ImageUrlSegment | ImageBase64Segment) -> InputItem:
    if isinstance(segment, TextSegment):
        return InputItem("text", segment.text)
    if isinstance(segment, ImageUrlSegment):
        return InputItem("image", segment.image_url)
    return InputItem("image", segment.image_base64)


def multimodal_query(body: MultimodalRequest) -> EmbedQuery:
    """One input per `inputs[i]`: a lone part as itself, several as one mixed input (validation refuses it for
    a model that embeds one part per input)."""
    items = tuple(mixed_input(tuple(_part(segment) for segment in item.content)) for item in body.inputs)
    return EmbedQuery(
        items=items,
        model=body.model,
        output_types=(body.output_dtype or "float",),
        output_param="output_dtype",
        shapes=frozenset({"dense"}),
        dimensions=body.output_dimension,
        dimensions_param="output_dimension",
        input_type=SHORT_INPUT_TYPES[body.input_type] if body.input_type else None,
        truncation=Truncation(enabled=body.truncation),
        items_param="inputs",
    )


class MultimodalEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    embedding: str | list[float] | list[int]  # str: base64
    index: int


class MultimodalUsage(BaseModel):
    """Voyage's usage fields. Embento counts text tokens and image positions together (`total_tokens`, as on
    every route) and measures no pixels: `text_tokens` is that count, the pixel counts 0."""

    text_tokens: int
    image_pixels: int = 0
    video_pixels: int = 0  # read by voyageai 0.5's MultimodalEmbeddingsObject
    total_tokens: int


class MultimodalResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[MultimodalEmbedding]
    model: str
    usage: MultimodalUsage


async def multimodal(engine: Engine, body: MultimodalRequest) -> Response:
    """`MultimodalResponse`, written straight from the arrays."""
    embeddings = await engine.embed(multimodal_query(body))
    encoded = _encoded(embeddings, "base64" in (body.output_encoding, body.encoding_format))
    usage = MultimodalUsage(text_tokens=embeddings.tokens, total_tokens=embeddings.tokens).model_dump()
    data = [{"object": "embedding", "embedding": vector, "index": i} for i, vector in enumerate(encoded)]
    return json_answer({"object": "list", "data": data, "model": embeddings.model, "usage": usage})
