"""Checks of a wire body before it becomes a query: fields that contradict each other, or leave no input, so that no
query can be made of them. The adapters (`gateway/wire/`) call them as they translate, each with its own field
names; everything a query can carry is checked against the model by the operation's entry point instead."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Sized
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from config.errors import InvalidRequest

M = TypeVar("M", bound=BaseModel)


def parsed_body(model: type[M], body: dict[str, Any]) -> M:
    """A route's body out of the root body (TEI's `/`); its validation errors as a 400 naming the field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidRequest(
            f"{where}: {first['msg']}" if where else first["msg"], param=str(first["loc"][0]) if first["loc"] else None
        ) from None


def check_not_empty(values: Sized | None, field: str, param: str | None = None) -> None:
    """A list the body gives (None: not given) holds something; the error names `param` (`field` unless given)."""
    if values is not None and not values:
        raise InvalidRequest(f"{field} must not be empty", param=param or field)


def check_one_given(given: Sequence[str], fields: str, param: str) -> None:
    """Exactly one of the alternative input fields (`fields` names them all): the second given is named, or
    `param` when none is."""
    if len(given) != 1:
        raise InvalidRequest(
            f"give exactly one of {fields}; got {given or 'none'}", param=given[1] if len(given) > 1 else param
        )


def check_alone(others_given: bool, fields: str, param: str) -> None:
    """`param`, given, is the only one of the alternative input fields (`fields` names them all)."""
    if others_given:
        raise InvalidRequest(f"give exactly one of {fields}", param=param)


def check_has_parts(parts: Sized, index: int, param: str) -> None:
    """An input of content parts (Cohere's v2) holds some."""
    if not parts:
        raise InvalidRequest(f"{param}[{index}] has no content parts", param=param)


def check_long_input_fields(late_chunking: bool, long_input: str | None, truncate: bool | None) -> None:
    """OpenAI's body with Embento's extensions: `late_chunking`, `long_input` and `truncate` do not contradict."""
    if late_chunking and (long_input is not None or truncate is False):
        raise InvalidRequest(
            "late_chunking embeds the whole document, in slices past the model's window; "
            "long_input and truncate do not apply to it",
            param="long_input" if long_input is not None else "truncate",
        )
    if truncate is False and long_input not in (None, "error"):
        raise InvalidRequest(
            f"truncate: false refuses long input; long_input '{long_input}' contradicts it", param="long_input"
        )


def sequence_texts(sequence: Sequence[object], index: int) -> list[str]:
    """TEI's /predict: each input one non-empty text or a pair of them, its texts."""
    texts = [text for text in sequence if isinstance(text, str) and text]
    if not 1 <= len(sequence) <= 2 or len(texts) < len(sequence):
        raise InvalidRequest(f"inputs[{index}] must be one non-empty text or a pair of them", param="inputs")
    return texts


def check_rerank_fields(body: Mapping[str, Any]) -> None:
    """A /rerank body that is not TEI's (`gateway.wire.shared_rerank.is_tei_rerank`): `documents`, not `texts`."""
    if body.get("texts") is not None:
        raise InvalidRequest("give documents (infinity, Cohere) or texts (TEI), not both", param="texts")
    if body.get("documents") is None:
        raise InvalidRequest("documents is required", param="documents")


def check_chunking_fields(auto_chunking: bool, size: int | None, overlap: int | None) -> None:
    """Voyage's `chunk_size` and `chunk_overlap` apply with `enable_auto_chunking` only."""
    if not auto_chunking and (size is not None or overlap is not None):
        raise InvalidRequest("chunk_size and chunk_overlap apply with enable_auto_chunking", param="chunk_size")
