"""Long inputs through the real engine and MiniLM's real tokenizer over a fake model service: the rows a
`long_input: mean` or late-chunking request sends, how their outputs are joined, the refusals, and how a long
request's rows are scheduled so that others are not stuck behind it."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from config.settings import EmbentoConfig
from gateway.queue.model_calls import ModelCalls, in_request_order, request_parts
from gateway.wire import openai, voyage
from models.base import TokenizedText
from testkit.checkpoints import WORDS
from tests.unit.gateway.fake_engine import (
    COLPALI,
    EMBEDDER,
    INFOS,
    SPLADE,
    answer,
    assert_refused,
    fake_output,
)

LIMIT = 256  # MiniLM's max_seq_length
CLS, SEP = 101, 102


def words(count: int) -> str:
    """`count` words, each one WordPiece token of MiniLM's vocabulary."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(count))


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def test_mean_sends_framed_windows_and_answers_their_token_weighted_mean(serve, tokenizers):
    text = words(540)
    tokens = tokenizers[EMBEDDER].count_tokens(text)
    assert 2 * 254 < tokens < 3 * 254, "three windows of at most 254 content tokens"
    status, body, service = answer(
        serve,
        openai.embed,
        openai.EmbeddingRequest,
        {"input": [text, "short"], "model": EMBEDDER, "long_input": "mean"},
    )
    assert status == 200, body
    windows, short = service.rows[:3], service.rows[3]
    assert [row.length for row in windows] == [256, 256, tokens - 2 * 254 + 2]
    assert all(row.input_ids[0] == CLS and row.input_ids[-1] == SEP for row in windows)
    assert all(row.normalize is False for row in windows), "windows are averaged before normalization"
    content = [i for row in windows for i in row.input_ids[1:-1]]
    assert len(content) == tokens
    expected = unit(sum(len(r.input_ids[1:-1]) * fake_output(r).astype(np.float64) for r in windows) / tokens)
    np.testing.assert_allclose(body["data"][0]["embedding"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(body["data"][1]["embedding"], fake_output(short), rtol=1e-6)
    assert body["usage"]["total_tokens"] == 256 + 256 + tokens - 2 * 254 + 2 + short.length


def test_mean_of_an_input_within_the_limit_sends_the_same_row_as_truncation(serve):
    rows = {}
    for mode in ("mean", "truncate"):
        body = {"input": words(200), "model": EMBEDDER, "long_input": mode, "input_type": "search_query"}
        status, _, service = answer(serve, openai.embed, openai.EmbeddingRequest, body)
        assert status == 200
        rows[mode] = service.rows
    assert [r.input_ids for r in rows["mean"]] == [r.input_ids for r in rows["truncate"]]


def test_late_chunking_sends_span_sums_covering_every_chunk_token_once(serve, tokenizers):
    chunks = [words(40 + i) for i in range(12)]  # ~500 tokens: past the limit, so in slices
    status, body, service = answer(
        serve, openai.embed, openai.EmbeddingRequest, {"input": chunks, "model": EMBEDDER, "late_chunking": True}
    )
    assert status == 200, body
    assert len(body["data"]) == len(chunks)
    assert all(row.spans for row in service.rows) and all(row.length == LIMIT for row in service.rows)
    covered = sum(stop - start for row in service.rows for start, stop in row.spans or ())
    tokens = sum(tokenizers[EMBEDDER].count_tokens(chunk) for chunk in chunks)
    assert tokens > LIMIT and covered == tokens, "each chunk token's state is taken once"
    assert all(abs(np.linalg.norm(item["embedding"]) - 1) < 1e-5 for item in body["data"])


def test_late_chunking_within_the_limit_is_one_row(serve):
    status, body, service = answer(
        serve,
        openai.embed,
        openai.EmbeddingRequest,
        {"input": ["a quick fox", "jumps over", "the dog"], "model": EMBEDDER, "late_chunking": True},
    )
    assert status == 200
    (row,) = service.rows
    assert row.spans == [(1, 4), (4, 6), (6, 8)]
    sums = fake_output(row)
    for item, (start, stop), chunk_sum in zip(body["data"], row.spans, sums):
        np.testing.assert_allclose(item["embedding"], unit(chunk_sum / (stop - start)), rtol=1e-5, atol=1e-6)


def test_voyage_documents_and_auto_chunks(serve):
    status, body, service = answer(
        serve,
        voyage.contextualized,
        voyage.ContextualizedRequest,
        {"inputs": [["a quick fox", "jumps over"], ["the dog"]], "model": EMBEDDER, "input_type": "document"},
    )
    assert status == 200, body
    assert [len(document["data"]) for document in body["data"]] == [2, 1]
    document = words(100)
    status, body, _ = answer(
        serve,
        voyage.contextualized,
        voyage.ContextualizedRequest,
        {"inputs": [[document]], "model": EMBEDDER, "enable_auto_chunking": True, "chunk_size": 30},
    )
    assert status == 200, body
    texts = [chunk["text"] for chunk in body["data"][0]["data"]]
    assert len(texts) == 4 and "".join(texts) == document


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "model": SPLADE, "long_input": "mean"}, "long_input"),
        ({"input": ["x", "y"], "model": SPLADE, "late_chunking": True}, "late_chunking"),
        ({"input": "x", "model": COLPALI, "long_input": "mean"}, "long_input"),
        ({"input": [[101, 2000, 102]], "model": EMBEDDER, "long_input": "mean"}, "input"),
        ({"input": "x", "model": EMBEDDER, "long_input": "mean", "truncate": False}, "long_input"),
        ({"input": ["ok", " "], "model": EMBEDDER, "late_chunking": True}, "input"),
        ({"input": ["a", "b"], "model": EMBEDDER, "late_chunking": True, "long_input": "error"}, "long_input"),
        ({"input": ["a", "b"], "model": EMBEDDER, "late_chunking": True, "truncate": False}, "truncate"),
    ],
    ids=[
        "sparse-mean",
        "sparse-late",
        "multi-vector-mean",
        "token-ids",
        "truncate-false",
        "chunk-without-tokens",
        "late-with-long-input",
        "late-with-truncate-false",
    ],
)
def test_refusals_on_the_openai_route(serve, body, param):
    message = assert_refused(answer(serve, openai.embed, openai.EmbeddingRequest, body), 400, param)
    if body["model"] in (SPLADE, COLPALI):
        assert "dense text embedders" in message and "'truncate'" in message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"inputs": [["a b c"]], "enable_auto_chunking": True, "chunk_size": 4, "chunk_overlap": 4}, "chunk_overlap"),
        ({"inputs": [["a", "b"]], "enable_auto_chunking": True, "chunk_size": 4}, "inputs"),
        ({"inputs": [["a"]], "chunk_size": 4}, "chunk_size"),
        ({"inputs": [["a", "b"]], "input_type": "query"}, "inputs"),
        ({"inputs": [["a", "b"]], "model": SPLADE}, "model"),  # the route answers dense vectors only
    ],
    ids=["overlap-not-below-size", "several-strings-auto", "size-without-auto", "query-lists", "sparse"],
)
def test_refusals_on_the_voyage_route(serve, body, param):
    assert_refused(
        answer(serve, voyage.contextualized, voyage.ContextualizedRequest, {"model": EMBEDDER, **body}), 400, param
    )


def test_a_long_request_goes_in_pass_sized_parts_cut_where_padding_costs_least():
    """The cuts the model service would make (`plan_batches`): the 30-token rows together, not padded onto
    10-token ones as consecutive cuts would ([10, 10, 10, 10], [10, 30, 30], [30, 5]: 190 padded tokens, not 150);
    and the outputs back in the request's order."""
    info = replace(INFOS[EMBEDDER], batch_size=4, max_batch_tokens=100)
    lengths = (10, 10, 10, 10, 10, 30, 30, 30, 5)
    rows = [TokenizedText(model=EMBEDDER, input_ids=[1] * length) for length in lengths]
    parts = request_parts(rows, info)
    assert [[lengths[i] for i in part] for part in parts] == [[5, 10, 10, 10], [10, 10], [30, 30, 30]]
    assert sorted(i for part in parts for i in part) == list(range(len(rows)))
    answered = [np.array([float(i)]) for part in parts for i in part]  # each output names its row
    assert [float(output[0]) for output in in_request_order(parts, answered)] == [float(i) for i in range(len(rows))]
    assert request_parts(rows, INFOS[EMBEDDER]) == [list(range(len(rows)))], "limits unknown: one part"
    assert request_parts(rows[:4], info) == [[0, 1, 2, 3]], "one pass: one part, in order"


class SlowService:
    """A model service whose every call takes a while (a pass's work); it records which requests each call
    carried, and says when the first one arrived."""

    def __init__(self) -> None:
        self.to_async = self
        self.calls: list[set[str]] = []
        self.first_call = asyncio.Event()

    async def embed(self, rows: list[TokenizedText]) -> list[np.ndarray]:
        self.calls.append({row.request_id for row in rows})
        self.first_call.set()
        await asyncio.sleep(0.02)
        return [np.ones(4, dtype=np.float32) for _ in rows]

    async def cancel(self, request_ids: list[str]) -> None:
        pass


def test_a_short_request_sent_during_a_long_one_is_answered_before_it_ends():
    info = replace(INFOS[EMBEDDER], batch_size=4, max_batch_tokens=10_000)

    async def scenario() -> tuple[SlowService, list[str]]:
        service = SlowService()
        calls = ModelCalls(EmbentoConfig(), ["embed"], {"TextEmbedder": service}, 64)
        finished: list[str] = []

        async def run(name: str, count: int) -> None:
            await calls.run(info, [TokenizedText(model=EMBEDDER, input_ids=[1] * 8) for _ in range(count)])
            finished.append(name)

        long = asyncio.create_task(run("long", 40))  # ten parts of 4 rows
        await service.first_call.wait()  # the long request's first part is in flight
        await run("short", 1)
        await long
        return service, finished

    # The short request is queued while the first part is in flight: it leaves next, or after the second part
    # if the host stalled it past the first part's return; never after the third, queued 20 ms later still.
    service, finished = asyncio.run(scenario())
    assert finished == ["short", "long"]
    (long_id,) = service.calls[0]
    short_call = next(i for i, ids in enumerate(service.calls) if ids - {long_id})
    assert short_call <= 2 and len(service.calls) == 11, service.calls
