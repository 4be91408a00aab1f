"""The internal queries: what a client asks of a model, apart from any wire format.

Each client family's adapter (`gateway/wire/`) turns its body into one of these; the engine validates it once
(`gateway.validation`) and answers with a result (`gateway.results`) that holds the query, never the body.
Queries are frozen: an adapter decides everything the engine needs, and nothing reads the body afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal

from models.base import Activation, Modality, Representation, Truncation
from models.kinds import Output, ScoreMode

OutputType = Literal["float", "base64", "int8", "uint8", "binary", "ubinary"]
# The output shapes a wire format has room for (`EmbedQuery.shapes`): the registry's outputs but scores.
ALL_SHAPES: frozenset[Output] = frozenset(("dense", "sparse", "multi-vector"))
InputType = Literal["search_query", "search_document", "classification", "clustering", "image"]


@dataclass(frozen=True)
class InputItem:
    """One input: one vector (or one row of vectors) comes back for it."""

    modality: Modality
    value: str | list[int]  # a text, a data URI or URL, or token ids
    # A mixed input (a text and images embedded together, one vector for all) holds all its parts here, in the
    # client's order; its own modality and value are then its first part's. () for an input of one part. Only
    # kinds whose spec has `mixed_inputs` take one (`gateway.validation`).
    parts: tuple[InputItem, ...] = ()

    @property
    def all_parts(self) -> tuple[InputItem, ...]:
        return self.parts or (self,)


def mixed_input(parts: tuple[InputItem, ...]) -> InputItem:
    """The input made of these parts: the part itself when there is one."""
    if len(parts) == 1:
        return parts[0]
    return InputItem(parts[0].modality, parts[0].value, parts=parts)


class LongInput(Enum):
    """What becomes of a text past the model's window: one choice per query (`EmbedQuery.long_input`)."""

    CUT = "truncate"  # cut to the window, from `truncation.side`
    REFUSE = "error"  # a 400 naming the input
    MEAN = "mean"  # embedded in windows of the model's limit, their vectors averaged (weighted by tokens)
    # The items are the chunks of one document, each embedded in the context of all (`ContextQuery`).
    LATE_CHUNKING = "late_chunking"


@dataclass(frozen=True)
class EmbedQuery:
    """Embed each item; the output controls say how the vectors leave."""

    items: tuple[InputItem, ...]
    model: str | None = None
    capability: Literal["embed", "embed_sparse"] = "embed"
    output_types: tuple[OutputType, ...] = ("float",)
    output_param: str = "encoding_format"  # the wire field that asked for `output_types`, named in errors
    shapes: frozenset[Output] = ALL_SHAPES  # the output shapes the wire format has room for
    dimensions: int | None = None
    dimensions_param: str = "dimensions"  # the wire field that asked for `dimensions`, named in errors
    normalize: bool | None = None  # None: the model's own behaviour
    max_active_dims: int | None = None
    prompt_name: str | None = None
    instruction: str | None = None
    input_type: InputType | None = None
    # The task adapter to embed through (`models.adapters`): Jina's `task`; once validated, the adapter's name
    # (`gateway.validation.with_task`), which Cohere's and Voyage's `input_type` may name instead.
    task: str | None = None
    truncation: Truncation = field(default_factory=Truncation)
    items_param: str = "input"  # the wire field holding the items, named in errors
    # Where each item sits in the body, when not at `items_param[i]` (TEI's similarity: the source sentence, then
    # each of `inputs.sentences`); named in errors about one item.
    item_params: tuple[str, ...] = ()
    long_input: LongInput = LongInput.CUT
    # The representations to answer, each under its own key (`output_types`); None: the model's own.
    representations: tuple[Representation, ...] | None = None
    representations_param: str = "output_types"
    keep_alive_s: float | None = None  # Ollama's `keep_alive` for the model from this request on (inf: forever)

    def __post_init__(self) -> None:
        """`long_input` is the one choice: a wire's `truncate: false` (a truncation that is off) is REFUSE, and the
        truncation the tokenizer is given cuts unless the query refuses."""
        if not self.truncation.enabled and self.long_input is LongInput.CUT:
            object.__setattr__(self, "long_input", LongInput.REFUSE)
        cuts = self.long_input is not LongInput.REFUSE
        if self.truncation.enabled != cuts:
            object.__setattr__(self, "truncation", replace(self.truncation, enabled=cuts))

    def item_param(self, index: int) -> str:
        """Where the item at `index` sits in the body, for an error about it alone."""
        return self.item_params[index] if self.item_params else f"{self.items_param}[{index}]"


@dataclass(frozen=True)
class AutoChunking:
    """Cut each document into chunks of `size` tokens on the server, `overlap` tokens shared by neighbours."""

    size: int | None = None  # None: the model's window less its special tokens
    overlap: int = 0
    size_param: str = "chunk_size"
    overlap_param: str = "chunk_overlap"


@dataclass(frozen=True)
class ContextQuery:
    """Embed every chunk of each document in the context of the whole document (late chunking). `embed`
    holds the model and output controls, and its items are the documents' chunks in order, `document_sizes`
    of them per document; with `auto_chunking`, one text per document, cut by the server."""

    embed: EmbedQuery
    document_sizes: tuple[int, ...]
    auto_chunking: AutoChunking | None = None

    def documents(self) -> list[list[str]]:
        """Each document's chunks (or its one text, to be cut)."""
        texts = [item.value for item in self.embed.items if isinstance(item.value, str)]  # all: token ids refused
        starts = [sum(self.document_sizes[:i]) for i in range(len(self.document_sizes))]
        return [texts[start : start + size] for start, size in zip(starts, self.document_sizes)]


@dataclass(frozen=True)
class RankQuery:
    """Score each document against the query, best first; documents are texts or, for image models, images."""

    query: str
    documents: tuple[str, ...]
    model: str | None = None
    top_n: int | None = None
    activation: Activation | None = None  # None: the model's own; "identity" for raw scores
    instruction: str | None = None
    truncation: Truncation = field(default_factory=Truncation)
    documents_param: str = "documents"
    # Models with several representations (BGE-M3): rank by one, or by their weighted mean (None: the model's
    # default, hybrid), with (dense, sparse, colbert) weights; each result may carry every mode's score.
    score_mode: ScoreMode | None = None
    weights: tuple[float, ...] | None = None
    return_scores: bool = False
    # The documents the client sent as images (Jina's `{"image": …}`): only a model that ranks images takes them.
    image_documents: tuple[int, ...] = ()
    keep_alive_s: float | None = None  # as `EmbedQuery.keep_alive_s`

    def document_item(self, index: int) -> InputItem:
        """A document for a model that reads text and image documents alike (a vision-language reranker): an image
        where the client marked it one (Jina's `{"image": …}`) or sent an image's data URI, else a text."""
        value = self.documents[index]
        image = index in self.image_documents or value.startswith("data:image/")
        return InputItem("image" if image else "text", value)


@dataclass(frozen=True)
class ClassifyQuery:
    """Every label's score for each text, or each (text, pair) where `pairs` gives a second text."""

    texts: tuple[str, ...]
    pairs: tuple[str | None, ...] | None = None
    model: str | None = None
    activation: Activation | None = None  # None: the model's own
    truncation: Truncation = field(default_factory=Truncation)
    texts_param: str = "input"


@dataclass(frozen=True)
class TokenizeQuery:
    """Each text's tokens with their offsets, through the model's prompt."""

    texts: tuple[str, ...]
    model: str | None = None
    prompt_name: str | None = None
    add_special_tokens: bool = True
    texts_param: str = "inputs"


@dataclass(frozen=True)
class DecodeQuery:
    """Token ids back to text."""

    ids: tuple[tuple[int, ...], ...]
    model: str | None = None
    skip_special_tokens: bool = True
