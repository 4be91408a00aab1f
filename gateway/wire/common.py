"""What several client families share on the wire: the embedding-input union and its one clear error, TEI's
truncation fields (taken by every text route), the rerank body infinity, Cohere and Jina share, usage, and
the label scores infinity and TEI both answer."""

from __future__ import annotations

import math
import uuid
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from starlette.responses import Response

from config.durations import seconds_or_forever
from gateway.queries import InputItem, InputType, RankQuery, mixed_input
from gateway.queue.priority import Prioritized
from models.base import Modality, Truncation
from models.kinds import ScoreMode

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing's own from Python 3.13

T = TypeVar("T")
TokenIds = list[StrictInt]
# Voyage's input types and the Cohere-style ones our models name their prompts (and ColBERT its roles) by.
SHORT_INPUT_TYPES: dict[str, InputType] = {"query": "search_query", "document": "search_document"}


def as_list(value: T | list[T]) -> list[T]:
    """One value or a list of them, as a list."""
    return value if isinstance(value, list) else [value]


class TextItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: StrictStr


class ImageItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    image: StrictStr = Field(description="A data URI (data:image/png;base64,...) or an http(s) URL.")


class AudioItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    audio: StrictStr = Field(description="A data URI (data:audio/wav;base64,...) or an http(s) URL.")


class TextImageItem(BaseModel):
    """A text and an image embedded together as one input (vision-language embedders: `mixed_inputs`)."""

    model_config = ConfigDict(extra="forbid")
    text: StrictStr
    image: StrictStr = Field(description="A data URI (data:image/png;base64,...) or an http(s) URL.")


TypedItem = TextItem | ImageItem | AudioItem | TextImageItem
TYPED_ITEM_KEYS = frozenset(name for item in (TextItem, ImageItem, AudioItem) for name in item.model_fields)
MAX_KEY_CHARS = 64  # of an unknown key named back in an error
EmbeddingInput = StrictStr | list[StrictStr | TypedItem] | TokenIds | list[TokenIds]


def reworded_union(field: str) -> Any:
    """A validator for an `EmbeddingInput` field: one clear message instead of the union's per-branch errors,
    which help nobody. Assign it in the model's body: `_input_message = reworded_union("input")`."""

    def reword(cls: type, value: object, handler: ValidatorFunctionWrapHandler) -> EmbeddingInput:
        videos = [i for i, item in enumerate(as_list(value)) if isinstance(item, dict) and "video" in item]
        if videos:
            raise ValueError(
                f"{field}[{videos[0]}] is a video; this server embeds texts, images and audio, not videos "
                "(docs/models.md: vl-embed)"
            )
        try:
            return handler(value)
        except ValidationError:
            if (unknown := _unknown_key(value)) is not None:
                index, key = unknown
                raise ValueError(
                    f"{field}[{index}] has an unknown key '{key[:MAX_KEY_CHARS]}'; a typed item holds "
                    f'"text", "image" or "audio" (or "text" and "image" together)'
                ) from None
            raise ValueError(
                f'{field} must be a string, a list of strings or typed items ({{"text"|"image"|"audio": '
                "...}), a list of token ids, or a list of token-id lists"
            ) from None

    return field_validator(field, mode="wrap")(reword)


def _unknown_key(value: object) -> tuple[int, str] | None:
    """The first typed item's key that no typed item has, with the item's index (a key is the client's word for a
    field, never its content)."""
    items = value if isinstance(value, list) else []
    found = (
        (index, key)
        for index, item in enumerate(items)
        if isinstance(item, dict)
        for key in item
        if key not in TYPED_ITEM_KEYS
    )
    return next(found, None)


def input_items(raw: EmbeddingInput | list[str], modality: Modality = "text") -> tuple[InputItem, ...]:
    """One item per input: typed items say their modality, token-id lists are text, plain strings are
    `modality`. (`list[str]`: infinity's legacy media routes take strings alone.)"""
    values = [raw] if isinstance(raw, str) or token_ids(raw) else raw
    return tuple(_item(value, modality) for value in values)


def token_ids(raw: object) -> TypeIs[list[int]]:
    """One input's token ids: a list of ints, told by its first (the body's model checked the rest). An empty
    list is no input at all."""
    return isinstance(raw, list) and bool(raw) and isinstance(raw[0], int)


def _item(value: str | list[int] | TypedItem, modality: Modality) -> InputItem:
    if isinstance(value, TextImageItem):  # one input of two parts, in the order the model card's dict gives them
        return mixed_input((InputItem("text", value.text), InputItem("image", value.image)))
    if isinstance(value, TextItem):
        return InputItem("text", value.text)
    if isinstance(value, ImageItem):
        return InputItem("image", value.image)
    if isinstance(value, AudioItem):
        return InputItem("audio", value.audio)
    if isinstance(value, list):
        return InputItem("text", value)
    return InputItem(modality, value)


class KeepAlive(BaseModel):
    """Ollama's `keep_alive`: how long the model stays loaded after this request (seconds, `5m`, or forever as
    `-1`), for callers that know better than the configuration."""

    keep_alive: StrictInt | StrictFloat | StrictStr | None = Field(
        None,
        description="How long the model stays loaded with no request after this one: seconds, or a duration "
        "('30s', '5m', '1h'); -1 or 'forever': it stays. Unset: the model's `keep_alive`.",
    )

    @field_validator("keep_alive")
    @classmethod
    def _readable(cls, value: Any) -> Any:
        seconds_or_forever(value)  # a ValueError here is the route's 400, naming the field
        return value

    def keep_alive_s(self) -> float | None:
        """Seconds (`math.inf`: forever); None when the request gave none."""
        if self.keep_alive is None:
            return None
        seconds = seconds_or_forever(self.keep_alive)
        return math.inf if seconds is None else seconds


class TruncationControls(Prioritized):
    """TEI's per-request truncation fields, on every text route that takes them."""

    truncate: StrictBool | None = Field(
        None,
        description="Cut input longer than the model takes (the default); "
        "false refuses it with a 400 naming the input.",
    )
    truncation_direction: Literal["right", "left"] | None = Field(
        None, description="Which end is cut: right (the default of most tokenizers) or left."
    )

    @field_validator("truncation_direction", mode="before")
    @classmethod
    def _either_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value  # TEI takes "Right" and "Left" too

    def truncation(self) -> Truncation:
        return Truncation(enabled=self.truncate is not False, side=self.truncation_direction)


def json_answer(answer: Any) -> Response:
    """A JSON answer (a dict or a list) holding float32 arrays, written straight from them by orjson, in their
    shortest float32 digits. On the event loop: orjson holds the GIL, so a thread would add its hop and free
    nothing (32 vectors of 384 take 0.5 ms here)."""
    return Response(orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    """Every input's tokens, the cache's hits included (as OpenAI counts them), and with a cached model the hits'
    share in `prompt_tokens_details.cached_tokens`."""

    prompt_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None

    @classmethod
    def of(cls, tokens: int, cached_tokens: int | None = None) -> Usage:
        details = None if cached_tokens is None else PromptTokensDetails(cached_tokens=cached_tokens)
        return cls(prompt_tokens=tokens, total_tokens=tokens, prompt_tokens_details=details)

    @model_serializer(mode="wrap")
    def _without_details_unless_cached(self, handler: SerializerFunctionWrapHandler) -> dict:
        return {key: value for key, value in handler(self).items() if value is not None}


def response_id() -> str:
    return f"embento-{uuid.uuid4()}"


# The rerank body of infinity's /rerank, Cohere v1 and Jina's /v1/rerank, and Cohere v2's /v2/rerank
class TextOrImage(BaseModel):
    """A document object: its other fields are accepted and ignored, but it is a text or an image, not both."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _not_both(cls, value: Any) -> Any:
        if isinstance(value, dict) and "image" in value and "text" in value:
            raise ValueError("a document holds a text or an image, not both")
        return value


class DocumentObject(TextOrImage):
    """Cohere v1 / Jina's document object: `text` is ranked."""

    text: StrictStr


class ImageDocument(TextOrImage):
    """Jina's image document (jina-reranker-m0's API): ranked by the models that rank images (CLIP, ColPali)."""

    image: StrictStr = Field(description="A data URI, or an http(s) URL with allow_url_inputs.")


Document = StrictStr | DocumentObject | ImageDocument


class RankControls(BaseModel):
    """Every rerank body's fields for models with several representations (BGE-M3)."""

    score_mode: ScoreMode | None = Field(
        None,
        description=(
            "BGE-M3: rank by `dense`, `sparse` or `colbert` (MaxSim averaged over the query's vectors), or `hybrid` "
            "(the default): FlagEmbedding's weighted mean of the three."
        ),
    )
    weights: list[float] | None = Field(
        None, description=("With `hybrid`: the (dense, sparse, colbert) weights; [0.4, 0.2, 0.4] when omitted.")
    )
    return_scores: StrictBool = Field(False, description="Each result carries every mode's score in `scores`.")

    def controls(self) -> dict[str, Any]:
        """These fields as `RankQuery` takes them."""
        return {
            "score_mode": self.score_mode,
            "weights": None if self.weights is None else tuple(self.weights),
            "return_scores": self.return_scores,
        }


class ModeScores(BaseModel):
    """A rerank result's score by every mode (`return_scores`); absent unless asked."""

    scores: dict[str, float] | None = None

    @model_serializer(mode="wrap")
    def _scores_when_asked(self, handler: SerializerFunctionWrapHandler) -> dict:
        answer = handler(self)
        if answer.get("scores") is None:
            answer.pop("scores", None)
        return answer


class RerankRequest(TruncationControls, RankControls, KeepAlive):
    model: str | None = Field(None, description="Served model name; defaults to the first reranker.")
    query: StrictStr
    documents: list[Document]
    top_n: StrictInt | None = Field(None, description="Return the best N; all when omitted.")
    return_documents: StrictBool = False
    raw_scores: StrictBool = Field(False, description="Logits instead of the model's activation.")
    instruction: StrictStr | None = Field(
        None,
        description="For causal-LM rerankers whose chat template takes "
        "one (Qwen3-Reranker's `<Instruct>`); the template's default otherwise.",
    )

    @field_validator("documents", mode="wrap")
    @classmethod
    def _one_clear_message(cls, value: object, handler: ValidatorFunctionWrapHandler) -> list[Document]:
        try:
            return handler(value)
        except ValidationError as exc:  # the union's per-branch errors help nobody
            where = next((f"documents[{e['loc'][0]}]" for e in exc.errors() if e["loc"]), "documents")
            raise ValueError(
                f"{where} must be a string, or an object with a string 'text' or (image models) 'image' field"
            ) from None


def rank_query(body: RerankRequest) -> RankQuery:
    return RankQuery(
        query=body.query,
        documents=tuple(_document_value(d) for d in body.documents),
        image_documents=tuple(i for i, d in enumerate(body.documents) if isinstance(d, ImageDocument)),
        model=body.model,
        top_n=body.top_n,
        activation="identity" if body.raw_scores else None,
        instruction=body.instruction,
        truncation=body.truncation(),
        keep_alive_s=body.keep_alive_s(),
        **body.controls(),
    )


def _document_value(document: Document) -> str:
    if isinstance(document, str):
        return document
    return document.text if isinstance(document, DocumentObject) else document.image


# Classification answers
class LabelScore(BaseModel):
    label: str
    score: float


def ranked_labels(labels: list[str], scores: list[list[float]]) -> list[list[LabelScore]]:
    """Every label per input, highest score first (as infinity and TEI order them)."""
    return [
        sorted(
            (LabelScore(label=label, score=score) for label, score in zip(labels, row)), key=lambda item: -item.score
        )
        for row in scores
    ]
