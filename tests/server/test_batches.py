"""Bulk jobs in real servers, through the official OpenAI SDK: files, batches, their outputs against the online
answers, refusals in OpenAI's shape, cancellation, and crash recovery (SIGKILL at validation, mid-batch and at
finalization on SQLite; one of two servers sharing a real PostgreSQL killed mid-batch)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from testkit.batches import WAIT_S, embedding_lines, finished, jsonl, output_lines, request_line, submitted
from testkit.postgres_server import PostgresServer, running_postgres
from tests.conftest import (
    MINILM,
    ROOT,
    TINY_RERANKER,
    free_port,
    kill_server,
    listening_server,
    metric,
    running_server,
    wait_ready,
)

MAX_FILE_BYTES = 200_000
CHUNK_LINES = 4
LEASE_S = 2.0  # a killed worker's chunks are taken over this soon
CRASH_HOOK = ROOT / "tests" / "crash_hook"  # its sitecustomize kills a worker at a job step


def jobs_config(folder: Path, **jobs) -> dict:
    return {
        "models": [{"model_id": MINILM}],
        "jobs": {"data_dir": str(folder / "jobs"), "lease_s": LEASE_S, "chunk_lines": CHUNK_LINES, **jobs},
    }


@pytest.fixture(scope="module")
def jobs_server(tmp_path_factory: pytest.TempPathFactory, tiny_reranker_path: Path) -> Iterator[str]:
    """MiniLM and a tiny reranker; one line on the model services at a time, so that each line runs alone, as
    the online requests it is compared with do."""
    folder = tmp_path_factory.mktemp("jobs")
    config = jobs_config(folder, lines_in_flight=1, max_file_bytes=MAX_FILE_BYTES)
    config["models"].append({"model_id": str(tiny_reranker_path), "served_model_name": TINY_RERANKER})
    with running_server(folder, config) as (url, _):
        yield url


def sdk(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_the_sdk_runs_a_batch_whose_bodies_are_the_online_answers(jobs_server):
    client = sdk(jobs_server)
    lines = embedding_lines(9)
    lines += [
        request_line("base64", {"model": MINILM, "input": "encoded", "encoding_format": "base64"}),
        request_line("refused", {"model": MINILM, "input": []}),
        request_line("unknown-model", {"model": "nope", "input": "x"}),
        request_line("no-input", {"model": MINILM}),
    ]
    batch = finished(client, submitted(client, lines).id)
    assert batch.status == "completed", batch
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (13, 10, 3)
    assert batch.in_progress_at <= batch.finalizing_at <= batch.completed_at
    answered = {line["custom_id"]: line for line in output_lines(client, batch.output_file_id)}
    refused = {line["custom_id"]: line for line in output_lines(client, batch.error_file_id)}
    assert list(answered) == [line["custom_id"] for line in lines[:10]]  # in the file's order
    assert set(refused) == {"refused", "unknown-model", "no-input"}
    for line in lines:
        online = httpx.post(f"{jobs_server}/v1/embeddings", json=line["body"], timeout=60)
        batched = answered.get(line["custom_id"]) or refused[line["custom_id"]]
        assert batched["error"] is None and batched["id"].startswith("batch_req_")
        assert batched["response"]["status_code"] == online.status_code
        assert batched["response"]["body"] == online.json(), line["custom_id"]


@pytest.mark.parametrize(
    ("endpoint", "body", "online_path"),
    [
        (
            "/v1/rerank",
            {"model": TINY_RERANKER, "query": "a fox", "documents": ["a fox jumps", "a dog", "x"]},
            "/v1/rerank",
        ),
        (
            "/v2/embed",
            {
                "model": MINILM,
                "texts": ["one", "two"],
                "input_type": "search_document",
                "embedding_types": ["float", "int8"],
            },
            "/v2/embed",
        ),
    ],
)
def test_rerank_and_cohere_embed_batches_answer_as_their_routes(jobs_server, endpoint, body, online_path):
    client = sdk(jobs_server)
    batch = finished(client, submitted(client, [request_line("only", body, endpoint)], endpoint).id)
    assert batch.status == "completed" and batch.request_counts.completed == 1, batch
    [line] = output_lines(client, batch.output_file_id)
    online = httpx.post(f"{jobs_server}{online_path}", json=body, timeout=60).json()
    online.pop("id", None), line["response"]["body"].pop("id", None)  # Cohere's answers carry a fresh id
    assert line["response"]["body"] == online


def test_uploads_and_creations_are_refused_in_openai_shape(jobs_server):
    client = sdk(jobs_server)
    with pytest.raises(BadRequestError, match="purpose") as refused:
        client.files.create(file=("a.jsonl", b"{}"), purpose="fine-tune")
    assert refused.value.body["param"] == "purpose"
    with pytest.raises(BadRequestError, match="jobs.max_file_bytes"):
        client.files.create(file=("big.jsonl", b"x" * (MAX_FILE_BYTES + 1)), purpose="batch")
    upload = client.files.create(file=("a.jsonl", jsonl(embedding_lines(1))), purpose="batch")
    with pytest.raises(BadRequestError, match="endpoint") as refused:
        client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert refused.value.status_code == 400 and refused.value.body["type"] == "invalid_request_error"
    assert client.files.delete(upload.id).deleted
    with pytest.raises(BadRequestError, match="no file"):
        client.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="24h")
    with pytest.raises(NotFoundError):
        client.files.retrieve(upload.id)
    with pytest.raises(NotFoundError):
        client.batches.retrieve("batch_nope")


def test_a_file_that_is_not_a_valid_batch_fails_with_each_problem_on_its_line(jobs_server):
    client = sdk(jobs_server)
    lines = [
        jsonl(embedding_lines(2)).decode(),
        "{not json",
        json.dumps(request_line("line-0", {"input": "x"})),
        json.dumps(request_line("other", {"query": "q", "documents": ["d"]}, "/v1/rerank")),
    ]
    upload = client.files.create(file=("bad.jsonl", "\n".join(lines).encode()), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="24h")
    batch = finished(client, batch.id)
    assert batch.status == "failed" and batch.failed_at is not None and batch.output_file_id is None
    assert [(error.code, error.line) for error in batch.errors.data] == [
        ("invalid_json_line", 3),
        ("duplicate_custom_id", 4),
        ("invalid_url", 5),
    ]


def test_a_cancelled_batch_stops_within_the_chunks_running_and_keeps_its_partial_output(jobs_server):
    client = sdk(jobs_server)
    batch = submitted(client, embedding_lines(400, "cancel"))
    while (batch := client.batches.retrieve(batch.id)).request_counts.completed < CHUNK_LINES:
        time.sleep(0.05)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    batch = finished(client, batch.id)
    assert batch.status == "cancelled"
    # Only chunks already claimed finish: at most the two each worker runs at once.
    assert batch.request_counts.completed <= cancelling.request_counts.completed + 2 * CHUNK_LINES
    custom_ids = [line["custom_id"] for line in output_lines(client, batch.output_file_id)]
    assert len(set(custom_ids)) == len(custom_ids) == batch.request_counts.completed < 400


def test_online_requests_take_a_priority(jobs_server):
    answer = httpx.post(f"{jobs_server}/v1/embeddings", json={"input": "urgent", "priority": -5}, timeout=60)
    assert answer.status_code == 200, answer.text
    refused = httpx.post(f"{jobs_server}/v1/embeddings", json={"input": "x", "priority": "high"}, timeout=60)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "priority"


def test_lists_page_with_the_sdk(jobs_server):
    client = sdk(jobs_server)
    ids = [submitted(client, embedding_lines(1, f"list{n}")).id for n in range(3)]
    for batch_id in ids:
        finished(client, batch_id)
    listed = [batch.id for batch in client.batches.list(limit=2)]  # the SDK follows `after` across pages
    assert listed[:3] == ids[::-1]


# Crash recovery
@contextlib.contextmanager
def killed_at(folder: Path, config: dict, step: str | None) -> Iterator[str]:
    """A server on `config` whose gateway workers die at that job step (tests/crash_hook, on its PYTHONPATH),
    SIGKILLed whole once one has (or, without a step, at the end of the block)."""
    if step is None:
        with listening_server(folder, config) as (url, process):
            wait_ready(url, process, folder / "server.log")
            yield url
        return
    path = os.pathsep.join(filter(None, [str(CRASH_HOOK), os.environ.get("PYTHONPATH")]))
    with listening_server(folder, config, PYTHONPATH=path, CRASH_HOOK_JOB_STEP=step) as (url, process):
        yield url
        deadline = time.monotonic() + WAIT_S
        while f"crash hook: killing this worker at {step}" not in (folder / "server.log").read_text(errors="replace"):
            assert time.monotonic() < deadline, (folder / "server.log").read_text()[-3000:]
            time.sleep(0.2)
        kill_server(process)


def test_a_batch_killed_at_validation_mid_batch_and_at_finalization_answers_each_line_once(tmp_path):
    config = jobs_config(tmp_path)
    lines = embedding_lines(10 * CHUNK_LINES, "crash")
    batch_id = None
    for step in ("validating", "chunk", "finalizing"):
        with killed_at(tmp_path, config, step) as url:
            if batch_id is None:  # the later servers resume it on their own
                batch_id = submitted(_ready_client(url, tmp_path), lines).id
    with killed_at(tmp_path, config, None) as url:
        client = sdk(url)
        batch = finished(client, batch_id)
        assert batch.status == "completed" and batch.request_counts.completed == len(lines), batch
        custom_ids = [line["custom_id"] for line in output_lines(client, batch.output_file_id)]
        assert custom_ids == [line["custom_id"] for line in lines]  # each once, in order


def _ready_client(url: str, folder: Path) -> OpenAI:
    deadline = time.monotonic() + WAIT_S
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return sdk(url)
        assert time.monotonic() < deadline, (folder / "server.log").read_text()[-3000:]
        time.sleep(0.5)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    with running_postgres(tmp_path_factory.mktemp("postgres"), free_port()) as server:
        yield server


def test_two_servers_on_postgresql_share_a_batch_and_one_survives_the_other_killed(postgres, tmp_path):
    folders = [tmp_path / "a", tmp_path / "b"]
    for folder in folders:
        folder.mkdir()
    configs = [{**jobs_config(folder, database_url=postgres.url)} for folder in folders]
    lines = embedding_lines(60 * CHUNK_LINES, "shared")
    with (
        listening_server(folders[0], configs[0]) as (first, first_process),
        listening_server(folders[1], configs[1]) as (second, second_process),
    ):
        wait_ready(first, first_process, folders[0] / "server.log")
        wait_ready(second, second_process, folders[1] / "server.log")
        batch = submitted(sdk(first), lines)
        assert sdk(second).batches.retrieve(batch.id).id == batch.id  # any replica answers every route

        def lines_done(url: str) -> float:
            return metric(httpx.get(f"{url}/metrics", timeout=10).text, "embento_batch_lines_total")

        deadline = time.monotonic() + WAIT_S
        while min(lines_done(first), lines_done(second)) == 0:  # both at work on it
            assert time.monotonic() < deadline
            time.sleep(0.1)
        kill_server(first_process)
        batch = finished(sdk(second), batch.id)
        assert batch.status == "completed" and batch.request_counts.completed == len(lines), batch
        custom_ids = [line["custom_id"] for line in output_lines(sdk(second), batch.output_file_id)]
        assert custom_ids == [line["custom_id"] for line in lines]
    assert int(postgres.sql("select count(*) from embento_batch_results")) == len(lines)
