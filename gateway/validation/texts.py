"""Checks of a list of inputs, shared by every operation: some, not too many, none empty, none too long. Also the
entry points of the operations that take plain texts or token ids alone: classify, tokenize, decode."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from config.errors import InvalidRequest
from config.settings import EmbentoConfig
from gateway.queries import ClassifyQuery, DecodeQuery, TokenizeQuery

EMPTY_ITEM = "{where} is empty"
EMPTY_INPUT = EMPTY_ITEM + "; every input needs at least one character or token"
Where = Callable[[int], str]  # an input's place in the body, by its index: `input[3]`, `inputs.sentences[0]`


def check_texts(
    texts: Sequence[str | Sequence[int]],
    param: str,
    max_items: int,
    max_chars: int | None,
    empty_item: str | None = EMPTY_ITEM,
    where: Where | None = None,
) -> None:
    """A list of inputs: some, at most `max_items`, none empty (unless `empty_item` is None), and no text over
    `max_chars` characters (token-id lists pass; None: no length bound). `where` names an input's place in the
    body (`param[i]` unless given)."""
    if not texts:
        raise InvalidRequest(f"{param} must not be empty", param=param)
    if len(texts) > max_items:
        raise InvalidRequest(f"{param} holds {len(texts)} items; at most {max_items} are allowed", param=param)
    empty = next((i for i, text in enumerate(texts) if len(text) == 0), None)
    if empty_item is not None and empty is not None:
        raise InvalidRequest(empty_item.format(where=_places(param, where)(empty)), param=param)
    if max_chars is not None:
        check_lengths(texts, param, max_chars, where)


def check_lengths(
    texts: Sequence[str | Sequence[int] | None], param: str, max_chars: int, where: Where | None = None
) -> None:
    """No text over `max_chars` characters; other entries (token ids, None) pass."""
    long = ((i, len(text)) for i, text in enumerate(texts) if isinstance(text, str) and len(text) > max_chars)
    if (found := next(long, None)) is not None:
        too_long, length = found
        raise InvalidRequest(
            f"{_places(param, where)(too_long)} has {length} characters; at most {max_chars} are allowed", param=param
        )


def _places(param: str, where: Where | None) -> Where:
    return where or (lambda index: f"{param}[{index}]")


def check_length(text: str | None, param: str, max_chars: int) -> None:
    if text is not None and len(text) > max_chars:
        raise InvalidRequest(f"{param} has {len(text)} characters; at most {max_chars} are allowed", param=param)


# Classify, tokenize, decode: each one entry point, before any work
def check_classify(query: ClassifyQuery, limits: EmbentoConfig) -> None:
    check_texts(query.texts, query.texts_param, limits.max_client_batch_size, limits.max_item_chars)
    if query.pairs is not None:
        check_lengths(query.pairs, query.texts_param, limits.max_item_chars)


def check_tokenize(query: TokenizeQuery, limits: EmbentoConfig) -> None:
    check_texts(query.texts, query.texts_param, limits.max_client_batch_size, limits.max_item_chars)


def check_decode(query: DecodeQuery, limits: EmbentoConfig) -> None:
    check_texts(query.ids, "ids", limits.max_client_batch_size, None, empty_item=None)
