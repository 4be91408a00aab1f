"""Each cached operation's request context (what of the query its outputs depend on) and its inputs' bytes: the
two halves of its keys (`keys.CacheKeys`). What an operation leaves out here must be applied after the cache.
The inputs' bytes are generators: a model without the cache never builds them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

from gateway.cache.keys import item_bytes, pair_bytes
from gateway.queries import ClassifyQuery, EmbedQuery, InputItem, LongInput, RankQuery
from models.base import Representation


def embed_context(query: EmbedQuery, prompt: str) -> dict[str, Any]:
    """An embedding depends on the prompt applied, the task adapter, the truncation, the input type (a ColBERT
    query is framed apart from a document even without a prompt), long-input windows, the normalization and the
    outputs asked."""
    return {
        "operation": "embed",
        "capability": query.capability,
        "prompt": prompt,
        "task": query.task,
        "truncation": asdict(query.truncation),
        "input_type": query.input_type,
        "windowed": query.long_input is LongInput.MEAN,
        "normalize": query.normalize,
        "representations": query.representations,
    }


def input_items(
    items: Sequence[InputItem], payloads: Sequence[tuple[str | bytes, ...]] | None = None
) -> Iterator[bytes]:
    """Texts and token ids by themselves; images and audio by their files' bytes (`payloads`: each item's parts),
    never a URL. A mixed input is keyed by all its parts in order, each framed by its length."""
    if payloads is None:
        return (item_bytes(item.modality, item.value) for item in items)
    return (_parts_bytes(item, parts) for item, parts in zip(items, payloads))


def _parts_bytes(item: InputItem, parts: tuple[str | bytes, ...]) -> bytes:
    if not item.parts:
        return item_bytes(item.modality, parts[0])
    pieces = [item_bytes(part.modality, value) for part, value in zip(item.parts, parts)]
    return b"M" + b"".join(len(piece).to_bytes(8, "big") + piece for piece in pieces)


def pairs_context(query: RankQuery) -> dict[str, Any]:
    """A cross-encoder's logit (before any activation) depends on the instruction and the truncation."""
    return {"operation": "score_pairs", "instruction": query.instruction, "truncation": asdict(query.truncation)}


def media_pairs_context(query: RankQuery) -> dict[str, Any]:
    """A vision-language reranker's logit: the query's text is part of each pair, whose document (a text, or an
    image's bytes) is the item."""
    return {**pairs_context(query), "query": query.query}


def pairs_items(query: RankQuery) -> Iterator[bytes]:
    return (pair_bytes(query.query, document) for document in query.documents)


def ranked_context(query: RankQuery, representations: tuple[Representation, ...] | None) -> dict[str, Any]:
    """A model that ranks by its own outputs (ColBERT, BGE-M3): each text's outputs depend on the truncation and
    the representations the score mode reads; its role (query or document) is part of its bytes."""
    return {"operation": "rank_outputs", "representations": representations, "truncation": asdict(query.truncation)}


def ranked_items(query: RankQuery) -> Iterator[bytes]:
    """The query, then each document: a query is framed apart from a document (ColBERT's expansion)."""
    yield pair_bytes("query", query.query)
    yield from (pair_bytes("document", document) for document in query.documents)


IMAGE_RANK_CONTEXT = {"operation": "rank_images"}


def classify_context(query: ClassifyQuery) -> dict[str, Any]:
    return {"operation": "classify", "truncation": asdict(query.truncation)}


def classify_items(query: ClassifyQuery) -> Iterator[bytes]:
    pairs = query.pairs or (None,) * len(query.texts)
    return (pair_bytes(text, pair) for text, pair in zip(query.texts, pairs))
