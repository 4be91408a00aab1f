"""Rows for text past a model's window, and how their outputs join back: one vector per input averaged over
its windows (`long_input: mean`), or one per chunk of a document from its token states (late chunking).

Each plan's rows are ordinary rows: they are admitted, batched with other requests' rows and run by the
model service like any input. The rules themselves are `models.long_inputs`; docs/api.md has them in words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gateway.queries import AutoChunking
from gateway.validation import (
    check_chunk_overlap,
    check_chunks_have_tokens,
    check_embed_length,
    check_window_room,
)
from models.base import TokenizedText
from models.long_inputs import (
    Segment,
    auto_chunk_spans,
    chunk_segments,
    joined_spans,
    slice_starts,
    state_owners,
    window_starts,
)
from models.preprocessing.text_tokenizer import TextTokenizer

Join = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


@dataclass(frozen=True)
class Plan:
    """Rows to run, and what turns their outputs (one per row, in order) into the answer's outputs."""

    rows: list[TokenizedText]
    join: Join
    texts: list[str] | None = None  # auto-chunking: each output's chunk text
    # Each output's tokens, where an output has rows of its own (not late chunking's, which share theirs).
    output_tokens: list[int] | None = None

    @property
    def tokens(self) -> int:
        """Every token the rows run, special tokens, prompts and overlaps included: what usage reports."""
        return sum(row.length for row in self.rows)

    @classmethod
    def direct(cls, rows: list[TokenizedText]) -> Plan:
        """One output per row, as the model answers it."""
        return cls(rows, list, output_tokens=[row.length for row in rows])

    @classmethod
    def joined(cls, plans: Sequence[Plan]) -> Plan:
        """Several plans run as one: their rows in order, each part joined by its own plan."""
        sizes = [len(plan.rows) for plan in plans]

        def join(outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
            joined, at = [], 0
            for plan, size in zip(plans, sizes):
                joined.extend(plan.join(outputs[at : at + size]))
                at += size
            return joined

        texts = [text for plan in plans for text in plan.texts or ()] if any(p.texts for p in plans) else None
        owned = all(plan.output_tokens is not None for plan in plans)
        output_tokens = [tokens for plan in plans for tokens in plan.output_tokens or ()] if owned else None
        return cls([row for plan in plans for row in plan.rows], join, texts, output_tokens)


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


class LongTexts:
    """Plans for one text embedder: its tokenizer, the limit in force (the model's, or a request's lower
    `max_tokens`), and whether its vectors leave at unit length."""

    def __init__(
        self, model: str, tokenizer: TextTokenizer, limit: int, normalize: bool, param: str, task: str | None = None
    ) -> None:
        self.model = model
        self.task = task  # the task adapter every row runs through
        self.tokenizer = tokenizer
        self.limit = limit
        self.normalize = normalize
        self.param = param
        self.settings = tokenizer.long_inputs

    # long_input: mean
    def windowed(self, where: str, text: str, prompt: str, prompt_length: int) -> Plan:
        """One vector for a text: as today within the limit, else the mean of its windows' pooled vectors
        weighted by their content tokens, then normalized if the model normalizes."""
        whole = self.tokenizer.document(prompt + text).ids
        if len(whole) <= self.limit:
            return Plan.direct([self._row(whole, prompt_length, self.normalize)])
        check_embed_length(where, len(whole), "input", self.settings.max_embed_len, self.param)
        prefix, suffix = self.tokenizer.frame
        prompt_ids = self.tokenizer.content(prompt) if prompt else []
        width = self.limit - len(prefix) - len(suffix) - len(prompt_ids)
        check_window_room(where, self.limit, width, self.settings.chunk_overlap, self.param)
        content = self.tokenizer.content(text)
        windows = [
            content[start : start + width] for start in window_starts(len(content), width, self.settings.chunk_overlap)
        ]
        rows = [
            self._row(prefix + prompt_ids + window + suffix, len(prefix) + len(prompt_ids), False) for window in windows
        ]
        weights = np.array([len(window) for window in windows], dtype=np.float64)

        def join(outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
            mean = (np.stack(outputs).astype(np.float64) * weights[:, None]).sum(axis=0) / weights.sum()
            return [(unit(mean) if self.normalize else mean).astype(np.float32)]

        return Plan(rows, join, output_tokens=[sum(row.length for row in rows)])

    def _row(self, ids: list[int], prompt_length: int, normalize: bool) -> TokenizedText:
        return TokenizedText(
            model=self.model, input_ids=ids, prompt_length=prompt_length, normalize=normalize, task=self.task
        )

    # Late chunking
    def in_context(self, where: str, chunks: Sequence[str], prompt: str) -> Plan:
        """Each chunk's vector: the mean of its tokens' final states in the encoding of the whole document
        (the chunks joined by spaces)."""
        text, spans = joined_spans(chunks, len(prompt))
        return self._document_plan(where, prompt + text, spans)

    def auto_chunked(self, where: str, document: str, prompt: str, chunking: AutoChunking) -> Plan:
        """The document cut into chunks of `chunking.size` tokens at whitespace, each embedded in context;
        the plan's `texts` are the chunks."""
        size = chunking.size or self.limit - sum(map(len, self.tokenizer.frame))
        check_chunk_overlap(chunking, size)
        tokens = self.tokenizer.document(document)
        starts = [start for (start, _), special in zip(tokens.offsets, tokens.special) if not special]
        cuts = auto_chunk_spans(tokens.text, starts, size, chunking.overlap)
        plan = self._document_plan(where, prompt + document, [(len(prompt) + a, len(prompt) + b) for a, b in cuts])
        return Plan(plan.rows, plan.join, [document[a:b] for a, b in cuts])

    def _document_plan(self, where: str, text: str, spans: list[tuple[int, int]]) -> Plan:
        document = self.tokenizer.document(text)
        total = len(document.ids)
        check_embed_length(where, total, "document", self.settings.max_embed_len, self.param)
        segments = chunk_segments(document.text, document.offsets, document.special, spans)
        empty = sorted(set(range(len(spans))) - {segment.chunk for segment in segments})
        check_chunks_have_tokens(where, empty, self.param)
        if total <= self.limit:
            rows = [self._spanned(document.ids, segments, 0)]
            pieces = [segments]
        else:
            overlap = self.settings.late_chunking_overlap
            overlap = self.limit // 4 if overlap is None else overlap
            starts = slice_starts(total, self.limit, min(overlap, self.limit - 1))
            owners = state_owners(total, self.limit, starts)
            rows, pieces = [], []
            for slice_index, start in enumerate(starts):
                owned = np.flatnonzero(owners == slice_index)
                if not len(owned):
                    continue
                kept = _within(segments, int(owned[0]), int(owned[-1]) + 1)
                if kept:
                    rows.append(self._spanned(document.ids[start : start + self.limit], kept, start))
                    pieces.append(kept)
        return Plan(rows, self._chunk_means(len(spans), pieces))

    def _spanned(self, ids: list[int], segments: list[Segment], start: int) -> TokenizedText:
        return TokenizedText(
            model=self.model,
            input_ids=ids,
            spans=[(s.start - start, s.stop - start) for s in segments],
            task=self.task,
        )

    def _chunk_means(self, count: int, pieces: list[list[Segment]]) -> Join:
        def join(outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
            sums = np.zeros((count, outputs[0].shape[-1]), dtype=np.float64)
            tokens = np.zeros(count, dtype=np.float64)
            for output, segments in zip(outputs, pieces):
                for row, segment in zip(output, segments):
                    sums[segment.chunk] += row
                    tokens[segment.chunk] += segment.stop - segment.start
            means = sums / tokens[:, None]
            return [(unit(mean) if self.normalize else mean).astype(np.float32) for mean in means]

        return join


def _within(segments: list[Segment], start: int, stop: int) -> list[Segment]:
    """The parts of `segments` inside positions [start, stop)."""
    kept = []
    for segment in segments:
        low, high = max(segment.start, start), min(segment.stop, stop)
        if low < high:
            kept.append(Segment(segment.chunk, low, high))
    return kept
