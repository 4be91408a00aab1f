"""The arithmetic of long inputs (`models.long_inputs`): windows, slices, which slice a token's state comes
from, which tokens make a chunk, and where auto-chunking cuts."""

from __future__ import annotations

import numpy as np
import pytest

from models.long_inputs import (
    Segment,
    auto_chunk_spans,
    chunk_segments,
    joined_spans,
    slice_starts,
    state_owners,
    window_starts,
)


@pytest.mark.parametrize(
    ("total", "width", "overlap", "starts"),
    [
        (10, 10, 0, [0]),  # fits: one window
        (11, 10, 0, [0, 10]),  # the last window holds one token
        (20, 10, 0, [0, 10]),
        (21, 10, 3, [0, 7, 14]),  # 14 + 10 >= 21: the first that reaches the end is the last
        (100, 30, 10, [0, 20, 40, 60, 80]),
    ],
)
def test_windows_step_by_width_less_overlap_until_one_reaches_the_end(total, width, overlap, starts):
    assert window_starts(total, width, overlap) == starts
    assert all(start + width >= total for start in starts[-1:])
    assert all(start + width < total for start in starts[:-1])


@pytest.mark.parametrize(
    ("total", "width", "overlap", "starts"),
    [
        (100, 40, 10, [0, 30, 60]),  # 60 + 40 = 100: the regular slice already ends at the end
        (90, 40, 10, [0, 30, 50]),  # the last slice is [N - L, N)
        (41, 40, 10, [0, 1]),
    ],
)
def test_slices_have_the_full_width_and_the_last_ends_at_the_end(total, width, overlap, starts):
    assert slice_starts(total, width, overlap) == starts


def test_a_token_state_comes_from_the_slice_where_it_lies_deepest_earlier_on_ties():
    owners = state_owners(90, 40, [0, 30, 50])
    # slice 0 [0, 40), slice 1 [30, 70), slice 2 [50, 90)
    assert owners[0] == 0 and owners[89] == 2
    assert owners[34] == 0  # depth 5 in slice 0 (39 - 34), 4 in slice 1
    assert owners[35] == 1  # depth 4 in slice 0, 5 in slice 1
    assert owners[59] == 1 and owners[60] == 2  # 60: depth 9 in slice 1, 10 in slice 2
    assert np.all(np.diff(owners) >= 0), "each slice owns one run of positions"
    tied = state_owners(71, 40, [0, 31])  # position 35: depth 4 in [0, 40) and in [31, 71)
    assert (tied[35], tied[36]) == (0, 1)


def test_chunk_tokens_skip_specials_and_whitespace_and_a_bpe_token_joins_the_word_after_its_space():
    text = "ab cd\n\nef"
    # [CLS], "ab", " cd" (byte-level: starts at the space), "\n\n" (whitespace only), "ef", [SEP]
    offsets = [(0, 0), (0, 2), (2, 5), (5, 7), (7, 9), (0, 0)]
    special = [True, False, False, False, False, True]
    assert chunk_segments(text, offsets, special, [(0, 2), (3, 5), (7, 9)]) == [
        Segment(0, 1, 2),
        Segment(1, 2, 3),
        Segment(2, 4, 5),
    ]
    # one chunk holding all: the whitespace-only token breaks the run in two
    assert chunk_segments(text, offsets, special, [(0, 9)]) == [Segment(0, 1, 3), Segment(0, 4, 5)]


def test_joined_chunks_are_separated_by_one_space_after_the_prompt():
    text, spans = joined_spans(["ab", "c", "def"], offset=4)
    assert text == "ab c def"
    assert [("pre:" + text)[a:b] for a, b in spans] == ["ab", "c", "def"]


def _word_starts(text: str) -> list[int]:
    """One token per word, starting at its first letter (WordPiece-like)."""
    starts, at = [], 0
    for word in text.split(" "):
        starts.append(at)
        at += len(word) + 1
    return starts


def test_auto_chunks_cut_at_whitespace_and_concatenate_back_without_overlap():
    text = " ".join(f"w{i:02d}" for i in range(23))
    spans = auto_chunk_spans(text, _word_starts(text), size=5, overlap=0)
    assert "".join(text[a:b] for a, b in spans) == text
    assert len(spans) == 5  # 23 tokens in chunks of 5
    assert all(a == 0 or text[a - 1] == " " or text[a] == " " for a, _ in spans)


def test_auto_chunks_with_overlap_share_tokens():
    text = " ".join(f"w{i:02d}" for i in range(20))
    spans = auto_chunk_spans(text, _word_starts(text), size=6, overlap=2)
    assert [text[a:b].split() for a, b in spans][:2] == [
        [f"w{i:02d}" for i in range(6)],
        [f"w{i:02d}" for i in range(4, 10)],
    ]
    assert spans[-1][1] == len(text)


def test_auto_chunks_cut_mid_word_when_no_whitespace_is_near():
    text = "x" * 50
    starts = list(range(0, 50, 5))  # ten 5-character tokens, no whitespace anywhere
    spans = auto_chunk_spans(text, starts, size=4, overlap=0)
    assert spans == [(0, 20), (20, 40), (40, 50)]


def test_auto_chunk_cut_moves_back_at_most_a_fifth_of_the_chunk():
    # tokens of 1 character: the cut at token 10 may move back 2 characters (a fifth of 10) to reach a space
    text = "aaaaaaa bbbbbbbbbbbb"
    starts = list(range(len(text)))
    near = auto_chunk_spans(text, starts, size=10, overlap=0)
    assert near[0] == (0, 8)  # the space at 7: the cut after it, 2 back from 10
    far = "aaaa bbbbbbbbbbbbbbb"
    assert auto_chunk_spans(far, list(range(len(far))), size=10, overlap=0)[0] == (0, 10)
