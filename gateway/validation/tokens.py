"""The checks that need token counts, called where those are known: `check_response_size` once the rows are planned
(`Engine._embed_texts`) and with cached hits once the answer is joined (`Engine.embed`); `check_request_tokens` on the
rows of each call to a model service, just before it (`Engine`, at each `ModelCalls.run`); the long-input ones
where a long input's plan is made (`gateway/inputs/long_rows.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from config.errors import InvalidRequest
from gateway.queries import AutoChunking, EmbedQuery
from models.base import ModelInfo, Row

# A JSON float as Python writes a float32's value (up to 17 significant digits, sign, point, exponent) and a
# separator; base64 spends 16/3 bytes on one.
JSON_FLOAT_BYTES = 22
BASE64_FLOAT_BYTES = 16 / 3


def check_response_size(query: EmbedQuery, info: ModelInfo, tokens: int, max_bytes: int) -> None:
    """Refuses, before any work, an answer whose vectors would pass `max_response_bytes`: one vector per token
    (multi-vector output) adds up fast. Counted as the JSON (or base64) the vectors become, one per input for
    dense output and one per token (of `tokens`, the inputs') for multi-vector output."""
    asked = query.representations or info.spec.representations[:1]
    per_float = BASE64_FLOAT_BYTES if "base64" in query.output_types else JSON_FLOAT_BYTES
    floats = 0
    if "dense" in asked:
        floats += len(query.items) * (query.dimensions or info.dimension)
    if "colbert" in asked:
        floats += tokens * info.dimension
    size = int(floats * per_float)
    if size > max_bytes:
        raise InvalidRequest(
            f"the answer would hold about {size / 1e6:.0f} MB of vectors, over max_response_bytes "
            f"({max_bytes / 1e6:.0f} MB); send fewer or shorter inputs per request"
            f"{', or ask for base64' if per_float == JSON_FLOAT_BYTES else ''}",
            param=query.items_param,
        )


def check_request_tokens(rows: Sequence[Row], most: int) -> None:
    """The tokens of a request's rows in one call: no one field is at fault, so none is named (every family's inputs
    differ)."""
    tokens = sum(row.length for row in rows)
    if tokens > most:
        raise InvalidRequest(f"the request holds {tokens} tokens after truncation; at most {most} are allowed")


def check_embed_length(where: str, tokens: int, what: str, most: int, param: str) -> None:
    """A long input or late-chunked document within `max_embed_len`."""
    if tokens > most:
        raise InvalidRequest(f"{where}: the {what} is {tokens} tokens; max_embed_len is {most}", param=param)


def check_window_room(where: str, window: int, width: int, overlap: int, param: str) -> None:
    """`long_input: mean`: a window holds more text tokens than windows share."""
    if width <= overlap:
        raise InvalidRequest(
            f"{where}: a window of {window} tokens holds {max(width, 0)} after special tokens "
            f"and the prompt, not more than chunk_overlap ({overlap})",
            param=param,
        )


def check_chunk_overlap(chunking: AutoChunking, size: int) -> None:
    """Auto-chunking's overlap below the chunk size (the model's window when none is given)."""
    if chunking.overlap >= size:
        raise InvalidRequest(
            f"{chunking.overlap_param} ({chunking.overlap}) must be less than the chunk size ({size})",
            param=chunking.overlap_param,
        )


def check_chunks_have_tokens(where: str, empty: list[int], param: str) -> None:
    """Late chunking: every chunk holds a token (the indices of those that hold none, ascending)."""
    if empty:
        raise InvalidRequest(f"{where}: chunk {empty[0]} has no tokens (only whitespace?)", param=param)
