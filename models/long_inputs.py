"""Inputs longer than a model's window, in token positions: the windows that cover them, which window each
token's state is taken from, which tokens make each chunk of a document, and where a document is cut into
chunks. Pure arithmetic on ids and character offsets, shared by the gateway's plans (`gateway/inputs/long_rows.py`);
docs/api.md states the same rules in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SNAP_FRACTION = 0.2  # how far back (of a chunk's characters) an auto-chunking cut may move to reach whitespace


@dataclass(frozen=True)
class LongInputSettings:
    """A text embedder's settings for over-long inputs (`ModelConfig`'s fields of the same names)."""

    chunk_overlap: int = 0
    late_chunking_overlap: int | None = None  # None: a quarter of the model's limit
    max_embed_len: int = 131_072


def window_starts(total: int, width: int, overlap: int) -> list[int]:
    """Starts of the windows of `width` that cover `total` positions, each `width - overlap` after the last;
    the last is the first that reaches the end, and may be shorter."""
    step = width - overlap
    starts = [0]
    while starts[-1] + width < total:
        starts.append(starts[-1] + step)
    return starts


def slice_starts(total: int, width: int, overlap: int) -> list[int]:
    """Starts of the slices of exactly `width` positions that cover `total` > `width` (long late chunking):
    every `width - overlap`, and the last one ends at the end."""
    step = width - overlap
    starts = [0]
    while starts[-1] + step + width < total:
        starts.append(starts[-1] + step)
    starts.append(total - width)
    return starts


def state_owners(total: int, width: int, starts: Sequence[int]) -> np.ndarray:
    """For each position, the slice its state is taken from: the one in which it lies farthest from the nearer
    edge, the earlier one on a tie."""
    best = np.full(total, -1, dtype=np.int64)
    best_depth = np.full(total, -1, dtype=np.int64)
    positions = np.arange(total)
    for index, start in enumerate(starts):
        inside = (positions >= start) & (positions < start + width)
        depth = np.minimum(positions - start, start + width - 1 - positions)
        better = inside & (depth > best_depth)
        best[better], best_depth[better] = index, depth[better]
    return best


def first_character(text: str, start: int, stop: int) -> int | None:
    """The first character of a token's span that is not whitespace (byte-level BPE tokens start at the space
    before their word); None for a span of whitespace only, or an empty one (special tokens)."""
    for at in range(start, stop):
        if not text[at].isspace():
            return at
    return None


@dataclass(frozen=True)
class Segment:
    """Consecutive token positions that belong to one chunk."""

    chunk: int
    start: int
    stop: int


def chunk_segments(
    text: str, offsets: Sequence[tuple[int, int]], special: Sequence[bool], spans: Sequence[tuple[int, int]]
) -> list[Segment]:
    """The runs of tokens of each chunk of `text`: a token belongs to every chunk whose characters
    [start, stop) hold its first non-whitespace character; special tokens to none. Tokens' first characters
    rise with their positions, so each chunk's tokens are found by bisection (400 chunks of a 100,000-token
    document: milliseconds, where a scan per chunk took seconds)."""
    firsts = [
        None if is_special else first_character(text, start, stop)
        for (start, stop), is_special in zip(offsets, special)
    ]
    positions = np.array([i for i, first in enumerate(firsts) if first is not None], dtype=np.int64)
    characters = np.array([first for first in firsts if first is not None], dtype=np.int64)
    segments: list[Segment] = []
    for chunk, (begin, end) in enumerate(spans):
        low, high = np.searchsorted(characters, [begin, end])
        members = positions[low:high]
        if not len(members):
            continue
        breaks = np.flatnonzero(np.diff(members) > 1) + 1  # a special or whitespace-only token between
        for run in np.split(members, breaks):
            segments.append(Segment(chunk, int(run[0]), int(run[-1]) + 1))
    return segments


def joined_spans(chunks: Sequence[str], offset: int) -> tuple[str, list[tuple[int, int]]]:
    """The chunks joined with one space, and each chunk's characters in that text after `offset` (a prompt's)."""
    spans, at = [], offset
    for chunk in chunks:
        spans.append((at, at + len(chunk)))
        at += len(chunk) + 1
    return " ".join(chunks), spans


def auto_chunk_spans(text: str, token_starts: Sequence[int], size: int, overlap: int) -> list[tuple[int, int]]:
    """Cut a document into chunks of `size` tokens, `overlap` shared between neighbours, each cut moved back to
    whitespace when some lies within a fifth of the chunk's characters (else mid-word). `token_starts` is the
    character where each token of `text` starts. Chunks of overlap 0 concatenate back to `text`."""
    count = len(token_starts)

    def char_at(token: int) -> int:
        return 0 if token == 0 else len(text) if token >= count else token_starts[token]

    def cut(token: int) -> int:
        if token == 0 or token >= count:
            return char_at(token)
        position = char_at(token)
        reach = SNAP_FRACTION * (position - char_at(max(0, token - size)))
        for candidate in range(position, -1, -1):
            if position - candidate > reach:
                break
            if candidate == 0 or text[candidate - 1].isspace() or text[candidate].isspace():
                return candidate
        return position

    return [(cut(start), cut(start + size)) for start in window_starts(max(count, 1), size, overlap)]
