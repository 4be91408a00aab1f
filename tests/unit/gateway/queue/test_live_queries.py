"""Live queries beside indexing (gateway/queue/priority.py, coalesce.py): the order in which calls leave under a
mixed queue, the time budget that cuts indexing calls while queries keep coming, and no starvation either way.

Each model-service call is returned by the test (`SteppedModelService`) and time moves only when the test moves it
(`StoppedClock`): nothing here depends on how fast the host is."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.queue import coalesce
from gateway.queue.coalesce import Coalescer
from gateway.queue.priority import BATCH, LIVE_MAX_ROWS, LIVE_MAX_TOKENS, Priority
from models.base import TokenizedText
from tests.unit.gateway.queue.test_coalesce import (
    FakeModelService,
    SteppedModelService,
    StoppedClock,
    return_call,
    rows,
    run_out,
    settle,
    until,
)

LIVE = Priority("live")
INDEXING = Priority("indexing")


def three_rows_a_call(service: SteppedModelService, clock: StoppedClock, **options) -> Coalescer:
    """A coalescer whose time budget holds three rows of any length."""
    return Coalescer(service.send, max_rows=64, clock=clock, within_budget=lambda batch: len(batch) <= 3, **options)


async def document_behind_a_query(
    service: SteppedModelService, clock: StoppedClock, **options
) -> tuple[Coalescer, asyncio.Task, asyncio.Task]:
    """`three_rows_a_call`, a query ("9") in its first call, and an 8-row document ("2") waiting behind it."""
    coalescer = three_rows_a_call(service, clock, **options)
    query = asyncio.create_task(coalescer.run(rows("9", 1), priority=LIVE))
    await until(lambda: len(service.calls) == 1)
    document = asyncio.create_task(coalescer.run(rows("2", 8), priority=INDEXING))
    await settle()
    return coalescer, query, document


@pytest.mark.parametrize(
    "priority, count, tokens, expected",
    [
        (Priority(), 1, 12, "live"),  # a search query
        (Priority(), LIVE_MAX_ROWS, LIVE_MAX_TOKENS, "live"),
        (Priority(), LIVE_MAX_ROWS + 1, 20, "indexing"),  # a handful of chunks
        (Priority(), 1, LIVE_MAX_TOKENS + 1, "indexing"),  # a document
        (Priority(level=-1), 100, 10_000, "live"),  # asked for by the client
        (Priority(level=1), 1, 12, "live"),  # a lower priority orders its tenant's requests; size still counts
        (Priority(interactive=True), 500, 50_000, "live"),  # the keys file marks the tenant interactive
        (BATCH, 1, 12, "batch"),  # a bulk-job line stays in idle capacity
    ],
)
def test_a_request_is_live_by_its_size_its_priority_or_its_tenant(priority, count, tokens, expected):
    assert priority.of_request(count, tokens).job_class == expected


def test_a_live_query_leaves_ahead_of_waiting_indexing_requests():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer = Coalescer(service.send, max_rows=64, clock=clock)
        tasks = [asyncio.create_task(coalescer.run(rows("1", 2), priority=INDEXING))]
        await until(lambda: len(service.calls) == 1)
        tasks += [asyncio.create_task(coalescer.run(rows(n, 2), priority=INDEXING)) for n in ("2", "3")]
        await settle()
        tasks.append(asyncio.create_task(coalescer.run(rows("9", 1), priority=LIVE)))  # arrives last
        await settle()
        await return_call(service, clock, 0)
        assert service.calls[1] == ["9"]  # alone, ahead of the indexing rows that waited longer
        answers = await run_out(service, clock, tasks)
        assert service.calls[2] == ["2", "2", "3", "3"]
        assert [[list(output) for output in answer] for answer in answers[1:3]] == [
            [[n, 1.0], [n, 2.0]] for n in (2.0, 3.0)
        ]

    asyncio.run(scenario())


def test_while_queries_keep_coming_an_indexing_request_leaves_in_pieces_within_the_budget():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer, query, document = await document_behind_a_query(service, clock)
        await return_call(service, clock, 0)
        assert service.calls[1] == ["2"] * 3  # its first piece: three rows
        later = asyncio.create_task(coalescer.run(rows("8", 1), priority=LIVE))
        await settle()
        await return_call(service, clock, 1)
        assert service.calls[2] == ["8"]  # the query that came meanwhile goes before the next piece
        await run_out(service, clock, [query, document, later])
        assert service.calls[3:] == [["2"] * 3, ["2", "2"]]
        assert [list(output) for output in document.result()] == [[2.0, i + 1.0] for i in range(8)]  # in order

    asyncio.run(scenario())


def test_without_recent_queries_an_indexing_request_leaves_whole():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer, query, document = await document_behind_a_query(service, clock)
        clock.advance(coalesce.INTERACTIVE_RECENT_S)  # the last query was a second ago
        await run_out(service, clock, [query, document])
        assert service.calls == [["9"], ["2"] * 8]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "query_priority, corpus_priority",
    [(LIVE, INDEXING), (Priority("live", tenant="a"), Priority("indexing", tenant="b"))],
    ids=["one tenant", "a tenant sending only queries beside another's corpus"],
)
def test_indexing_always_progresses_however_many_queries_come(query_priority, corpus_priority):
    """Queries that never stop (a new one arrives during every call) take every other call: the corpus the others."""

    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer = three_rows_a_call(service, clock)

        def query(n: int) -> asyncio.Task:
            return asyncio.create_task(coalescer.run(rows(str(n), 1), priority=query_priority))

        tasks = [query(10)]
        await until(lambda: len(service.calls) == 1)
        tasks.append(asyncio.create_task(coalescer.run(rows("2", 9), priority=corpus_priority)))
        for call in range(5):
            tasks.append(query(11 + call))
            await settle()
            await return_call(service, clock, call)
        assert service.calls[1::2] == [["2"] * 3] * 3  # every other call
        assert service.calls[2::2] == [["11", "12"], ["13", "14"]]
        await run_out(service, clock, tasks)
        assert all(task.done() for task in tasks)

    asyncio.run(scenario())


def test_tenants_share_the_live_class_fairly():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer = Coalescer(service.send, max_rows=64, clock=clock, one_pass=lambda batch: len(batch) <= 4)
        first = asyncio.create_task(coalescer.run(rows("20", 1), priority=Priority("live", tenant="b")))
        await until(lambda: len(service.calls) == 1)
        flood = [
            asyncio.create_task(coalescer.run(rows(str(n), 1), priority=Priority("live", tenant="a")))
            for n in range(2, 10)
        ]
        await settle()
        await return_call(service, clock, 0)
        later = asyncio.create_task(coalescer.run(rows("21", 1), priority=Priority("live", tenant="b")))
        await settle()
        await return_call(service, clock, 1)
        assert service.calls[1:3] == [["2", "3", "4", "5"], ["21", "6", "7", "8"]]  # b's query first in the next call
        await run_out(service, clock, [first, *flood, later])

    asyncio.run(scenario())


def test_on_a_gpu_indexing_holds_one_call_while_queries_come_so_a_query_leaves_at_once():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        coalescer = Coalescer(service.send, max_rows=64, clock=clock, within_budget=lambda batch: len(batch) <= 2)
        coalescer.max_calls = 2
        query = asyncio.create_task(coalescer.run(rows("9", 1), priority=LIVE))
        await until(lambda: len(service.calls) == 1)
        documents = [asyncio.create_task(coalescer.run(rows(n, 2), priority=INDEXING)) for n in ("2", "3")]
        await until(lambda: len(service.calls) == 2)
        service.release(0)  # the query is answered; a second call may leave, but not a second indexing one
        await query
        await settle()
        assert service.calls == [["9"], ["2", "2"]]
        later = asyncio.create_task(coalescer.run(rows("8", 1), priority=LIVE))
        await until(lambda: len(service.calls) == 3)
        assert service.calls[2] == ["8"]  # left at once, beside the indexing call in flight
        await run_out(service, clock, [later, *documents])
        assert service.calls[3] == ["3", "3"]

    asyncio.run(scenario())


def test_a_request_abandoned_between_its_pieces_sends_no_more_of_them():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        dropped: list[str] = []
        _, query, document = await document_behind_a_query(
            service, clock, dropped=lambda gone: dropped.extend(r.request_id for r in gone)
        )
        await return_call(service, clock, 0)
        assert service.calls[1] == ["2"] * 3
        document.cancel()  # its deadline passed
        service.release_all()
        await settle()
        await query
        assert service.calls == [["9"], ["2"] * 3]
        assert dropped == ["2"] * 5  # the rows that never left

    asyncio.run(scenario())


def test_each_requests_wait_is_told_by_class_once():
    async def scenario() -> None:
        service, clock = SteppedModelService(), StoppedClock()
        waits: list[tuple[int, float]] = []
        coalescer = three_rows_a_call(
            service, clock, waited=lambda job_class, seconds: waits.append((job_class, seconds))
        )
        query = asyncio.create_task(coalescer.run(rows("9", 1), priority=LIVE))
        await until(lambda: len(service.calls) == 1)
        document = asyncio.create_task(coalescer.run(rows("2", 5), priority=INDEXING))
        await settle()
        clock.advance(0.25)
        service.release(0)  # no return wait: indexing leaves next
        await until(lambda: len(service.calls) == 2)
        await run_out(service, clock, [query, document])
        assert waits == [(0, 0.0), (1, 0.25)]  # the document's once, for its first piece

    asyncio.run(scenario())


def test_a_failed_piece_fails_its_request_and_its_rest_is_not_sent():
    async def scenario() -> None:
        service = FakeModelService()
        coalescer = Coalescer(service.send, max_rows=64, within_budget=lambda batch: len(batch) <= 3)
        service.fail = True
        query = asyncio.create_task(coalescer.run(rows("9", 1), priority=LIVE))
        await settle()
        document = asyncio.create_task(coalescer.run(rows("2", 8), priority=INDEXING))
        await settle()
        service.release.set()
        for task in (query, document):
            with pytest.raises(ConnectionError):
                await task
        await settle()
        assert service.calls == [["9"], ["2"] * 3]

    asyncio.run(scenario())


@pytest.fixture
def model_calls():
    from config.settings import EmbentoConfig, ModelConfig
    from gateway.queue.model_calls import ModelCalls

    return ModelCalls(EmbentoConfig(models=[ModelConfig(model_id="m")]), ["embed"], {"TextEmbedder": None}, 64)


def budget_rows(lengths: list[int]) -> list[TokenizedText]:
    return [TokenizedText(model="m", input_ids=[1] * length, request_id="r") for length in lengths]


def test_the_model_calls_budget_is_the_cost_model_against_the_models_pass_budget(model_calls):
    from models.batching import PassCost

    model_calls.pass_costs["m"] = PassCost(call_s=0.002, token_s=0.0001)  # 2 ms + 0.1 ms per padded token
    model_calls.budgets_s["m"] = 0.030  # bounds the rows' 0.1 ms each: any call, a query's too, pays the 2 ms
    assert model_calls._within_budget(budget_rows([10] * 30))  # 30 ms of work
    assert not model_calls._within_budget(budget_rows([10] * 31))
    assert not model_calls._within_budget(budget_rows([10, 290]))  # 2 rows padded to 290: 58 ms
    assert not model_calls._within_budget(budget_rows([1000]))  # over it alone: the coalescer sends it alone anyway
    del model_calls.pass_costs["m"]
    assert model_calls._within_budget(budget_rows([10] * 1000))  # no cost known: no cut


def test_a_cost_is_fitted_from_two_timed_calls():
    from models.batching import PassCost

    cost = PassCost.fitted((10, 0.003), (320, 0.034))
    assert cost is not None
    assert cost.token_s == pytest.approx(0.0001)
    assert cost.call_s == pytest.approx(0.002)
    assert cost.seconds([10] * 28) == pytest.approx(0.030)
    assert PassCost.fitted((10, 0.003), (320, 0.003)) is None  # no slower: nothing to tell


def test_the_outputs_arrive_whole_whatever_pieces_they_left_in():
    async def scenario(within_budget) -> list[list[float]]:
        service = FakeModelService()
        service.release.set()
        coalescer = Coalescer(service.send, max_rows=64, within_budget=within_budget)
        await coalescer.run(rows("9", 1), priority=LIVE)
        answer = await coalescer.run(rows("2", 7), priority=INDEXING)
        return [list(output) for output in answer]

    assert asyncio.run(scenario(lambda batch: len(batch) <= 2)) == asyncio.run(scenario(lambda batch: True))
    assert np.array(asyncio.run(scenario(lambda batch: False))).shape == (7, 2)


def test_the_same_inputs_give_the_same_vectors_in_budget_sized_pieces_or_in_one_call(minilm_path):
    """The real model service's pool behind the coalescer: a document cut to a budget of 3 rows a call (passes of
    1-3 rows, each padded to its own longest) answers what one call of all 40 rows does (passes of 32 and 8)."""
    from config.settings import ModelConfig
    from models.inference.text_encoder import TextEncoder
    from models.preprocessing.text_tokenizer import TextTokenizer
    from runners.pool import ModelPool
    from testkit.sentences import make_sentences
    from tests.tolerance import assert_same_vectors

    cfg = ModelConfig(model_id=str(minilm_path), served_model_name="m", device="cpu", backend="torch")
    pool = ModelPool(lambda folder, config: TextEncoder(folder, config), [cfg], threads=2)
    ids = TextTokenizer(minilm_path, cfg).encode_texts(make_sentences(40, seed=5))

    calls: list[int] = []

    async def send(batch: list[TokenizedText]) -> list[np.ndarray]:
        calls.append(len(batch))
        return await pool.run(batch)

    async def embedded(within_budget) -> list[np.ndarray]:
        calls.clear()
        coalescer = Coalescer(send, max_rows=64, clock=StoppedClock(), within_budget=within_budget)
        await coalescer.run(TokenizedText.rows("m", ids[:1]), priority=LIVE)  # a query came: the budget holds
        return await coalescer.run(TokenizedText.rows("m", ids), priority=INDEXING)

    pieces = asyncio.run(embedded(lambda batch: len(batch) <= 3))
    assert calls == [1] + [3] * 13 + [1]
    whole = asyncio.run(embedded(None))
    assert calls == [1, 40]
    assert_same_vectors(np.stack(pieces), np.stack(whole))


class TwoApiService:
    """A text model service's batchable and live APIs, recording which each call went to."""

    def __init__(self) -> None:
        self.to_async = self
        self.calls: list[tuple[str, int]] = []

    async def embed(self, batch: list[TokenizedText]) -> list[np.ndarray]:
        self.calls.append(("embed", len(batch)))
        return [np.ones(4, dtype=np.float32)] * len(batch)

    async def embed_live(self, batch: list[TokenizedText]) -> list[np.ndarray]:
        self.calls.append(("embed_live", len(batch)))
        return [np.ones(4, dtype=np.float32)] * len(batch)


def test_live_queries_go_to_the_live_api_for_a_model_with_a_live_lane():
    from dataclasses import replace

    from config.settings import EmbentoConfig, ModelConfig
    from gateway.queue.model_calls import ModelCalls
    from tests.unit.gateway.fake_engine import EMBEDDER, INFOS

    async def scenario() -> list[tuple[str, int]]:
        service = TwoApiService()
        calls = ModelCalls(
            EmbentoConfig(models=[ModelConfig(model_id=EMBEDDER)]), ["embed"], {"TextEmbedder": service}, 64
        )
        info = INFOS[EMBEDDER]

        def text(count: int) -> list[TokenizedText]:
            return [TokenizedText(model=EMBEDDER, input_ids=[101, 7, 102]) for _ in range(count)]

        await calls.run(replace(info, live_lane=False), text(1))  # no lane: a query takes the batchable API
        laned = replace(info, live_lane=True)
        await calls.run(laned, text(1))  # a query
        await calls.run(laned, text(8))  # indexing
        return service.calls

    assert asyncio.run(scenario()) == [("embed", 1), ("embed_live", 1), ("embed", 8)]
