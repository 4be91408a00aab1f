"""The job store on SQLite and on a real PostgreSQL (testkit/postgres_server.py), under a clock the test moves:
claims and leases, a chunk answered once whoever held it, cancellation, expiry, the files' limits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from config import errors
from config.keys_file import Tenant
from config.settings import JobSettings
from gateway.jobs import schema
from gateway.jobs.leases import ChunkLeases, StepLeases
from gateway.jobs.lines import parse_batch_file
from gateway.jobs.store import JobStore
from gateway.tenants.keys import OPEN
from testkit.postgres_server import PostgresServer, running_postgres
from tests.conftest import free_port

LEASE_S = 60.0
DAY_S = 24 * 3600


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    with running_postgres(tmp_path_factory.mktemp("postgres"), free_port()) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str | None, Path]]:
    """(database_url, data_dir): SQLite in a fresh folder, or the module's PostgreSQL emptied after the test."""
    if request.param == "sqlite":
        yield None, tmp_path
        return
    server = request.getfixturevalue("postgres")
    yield server.url, tmp_path
    store = JobStore(JobSettings(database_url=server.url), tmp_path)
    schema.metadata.drop_all(store.engine)
    store.engine.dispose()


def make_store(database: tuple[str | None, Path], clock: Clock, **settings) -> JobStore:
    url, folder = database
    return JobStore(JobSettings(database_url=url, lease_s=LEASE_S, **settings), folder, clock)


def batch_file(count: int, url: str = "/v1/embeddings") -> bytes:
    return "\n".join(
        json.dumps({"custom_id": f"c{i}", "method": "POST", "url": url, "body": {"input": f"text {i}"}})
        for i in range(count)
    ).encode()


def validated_batch(store: JobStore, count: int) -> str:
    """A batch of `count` lines, validated: in progress."""
    upload = store.add_file("in.jsonl", "batch", batch_file(count))
    batch_id = store.create_batch("/v1/embeddings", upload["id"], "24h", {"k": "v"})["id"]
    step = StepLeases(store).claim_step("validator")
    assert step == {"id": batch_id, "status": "validating", "expires_at": int(store.clock()) + DAY_S}
    parsed, problems = parse_batch_file(StepLeases(store).upload_bytes(upload["id"]), "/v1/embeddings", 1000)
    StepLeases(store).validated(batch_id, "validator", parsed, problems)
    return batch_id


def answers(chunk, status: int = 200) -> list[tuple[int, bool, str]]:
    return [
        (line.number, status == 200, json.dumps({"custom_id": line.custom_id, "status": status}))
        for line in chunk.lines
    ]


def test_a_batch_runs_chunk_by_chunk_and_its_output_file_holds_each_line_once_in_order(database):
    store = make_store(database, Clock(), chunk_lines=2)
    batch_id = validated_batch(store, 5)
    assert store.batch(batch_id)["status"] == "in_progress"
    claimed = [ChunkLeases(store).claim_chunk(worker) for worker in ("a", "b", "a")]
    assert [(chunk.first_line, [line.custom_id for line in chunk.lines]) for chunk in claimed] == [
        (1, ["c0", "c1"]),
        (3, ["c2", "c3"]),
        (5, ["c4"]),
    ]
    assert ChunkLeases(store).claim_chunk("c") is None  # every chunk is held
    assert StepLeases(store).claim_step("c") is None  # and none is stored yet: nothing to finalize
    for chunk, worker in zip(reversed(claimed), ("a", "b", "a")):
        assert ChunkLeases(store).store_chunk(chunk, worker, answers(chunk, 400 if chunk.first_line == 3 else 200))
    assert StepLeases(store).claim_step("f") == {
        "id": batch_id,
        "status": "in_progress",
        "expires_at": store.batch(batch_id)["expires_at"],
    }
    assert StepLeases(store).finalizing(batch_id, "f")
    StepLeases(store).finish(batch_id, "f", "finalizing", "completed")
    record = store.batch(batch_id)
    assert (record["status"], record["total"], record["completed"], record["failed"]) == ("completed", 5, 3, 2)
    output = b"".join(store.content(store.file(record["output_file_id"]))).decode().splitlines()
    errors_file = b"".join(store.content(store.file(record["error_file_id"]))).decode().splitlines()
    assert [json.loads(line)["custom_id"] for line in output] == ["c0", "c1", "c4"]
    assert [json.loads(line)["custom_id"] for line in errors_file] == ["c2", "c3"]
    assert store.file(record["output_file_id"])["bytes"] == len("\n".join(output)) + 1


def test_a_chunk_whose_worker_lost_its_lease_is_run_again_and_stored_once(database):
    clock = Clock()
    store = make_store(database, clock, chunk_lines=10)
    batch_id = validated_batch(store, 3)
    first = ChunkLeases(store).claim_chunk("dead")
    assert ChunkLeases(store).claim_chunk("other") is None
    clock.now += LEASE_S + 1  # its worker died: the lease runs out
    second = ChunkLeases(store).claim_chunk("other")
    assert second is not None and second.first_line == first.first_line
    assert ChunkLeases(store).store_chunk(second, "other", answers(second))
    # the dead worker's late results are dropped
    assert not ChunkLeases(store).store_chunk(first, "dead", answers(first))
    assert not ChunkLeases(store).renew(first, "dead")
    assert store.batch(batch_id)["completed"] == 3


def test_a_live_worker_keeps_its_chunk_by_renewing_its_lease(database):
    clock = Clock()
    store = make_store(database, clock)
    validated_batch(store, 3)
    chunk = ChunkLeases(store).claim_chunk("live")
    clock.now += LEASE_S * 0.6
    assert ChunkLeases(store).renew(chunk, "live")
    clock.now += LEASE_S * 0.6  # past the first lease, within the renewed one
    assert ChunkLeases(store).claim_chunk("other") is None
    assert ChunkLeases(store).store_chunk(chunk, "live", answers(chunk))


def test_a_cancelled_batch_takes_no_new_chunk_and_keeps_its_partial_output(database):
    clock = Clock()
    store = make_store(database, clock, chunk_lines=1)
    batch_id = validated_batch(store, 3)
    done, running = ChunkLeases(store).claim_chunk("a"), ChunkLeases(store).claim_chunk("b")
    assert ChunkLeases(store).store_chunk(done, "a", answers(done))
    assert store.cancel(batch_id)["status"] == "cancelling"
    assert ChunkLeases(store).claim_chunk("c") is None  # the third chunk never starts
    assert StepLeases(store).claim_step("c") is None  # while a chunk still runs
    assert ChunkLeases(store).store_chunk(running, "b", answers(running))
    step = StepLeases(store).claim_step("c")
    assert step["status"] == "cancelling"
    StepLeases(store).finish(batch_id, "c", "cancelling", "cancelled")
    record = store.batch(batch_id)
    assert record["status"] == "cancelled" and record["cancelled_at"] is not None
    output = b"".join(store.content(store.file(record["output_file_id"]))).decode().splitlines()
    assert [json.loads(line)["custom_id"] for line in output] == ["c0", "c1"]


def test_files_and_batches_expire_by_the_clock(database):
    clock = Clock()
    store = make_store(database, clock, retention_s=7 * DAY_S)
    batch_id = validated_batch(store, 2)  # its input uploaded now
    chunk = ChunkLeases(store).claim_chunk("a")
    assert ChunkLeases(store).store_chunk(chunk, "a", answers(chunk)[:1])
    clock.now += DAY_S  # the batch's 24 h window has passed
    assert store.batch(batch_id)["status"] == "in_progress"
    step = StepLeases(store).claim_step("w")
    assert step["id"] == batch_id and step["expires_at"] <= clock.now
    assert ChunkLeases(store).claim_chunk("w") is None  # no work on an expired batch
    StepLeases(store).finish(batch_id, "w", "in_progress", "expired")
    record = store.batch(batch_id)
    assert record["status"] == "expired" and record["expired_at"] == int(clock.now)
    assert store.file(record["output_file_id"])["bytes"] > 0  # what was done before it expired
    store.add_file("later.jsonl", "batch", batch_file(1))
    assert StepLeases(store).expire_files() == 0
    clock.now += 6 * DAY_S  # the input is 7 days old, the output and the later upload 6
    assert StepLeases(store).expire_files() == 1
    assert sorted(r["filename"] for r in store.files(None, None, 10, True)) == [
        f"{batch_id}_output.jsonl",
        "later.jsonl",
    ]
    clock.now += DAY_S
    assert StepLeases(store).expire_files() == 2
    assert store.files(None, None, 10, True) == []
    if database[0] is None:
        assert list((database[1] / "files").iterdir()) == []  # their bytes went with them


def test_uploads_past_the_stored_bytes_cap_are_refused(database):
    store = make_store(database, Clock(), max_stored_bytes=1000)
    first = store.add_file("a.jsonl", "batch", b"x" * 600)
    with pytest.raises(errors.InvalidRequest, match="max_stored_bytes"):
        store.add_file("b.jsonl", "batch", b"x" * 600)
    assert store.delete_file(first["id"])
    store.add_file("b.jsonl", "batch", b"x" * 600)


def test_a_batch_needs_an_existing_batch_file(database):
    store = make_store(database, Clock())
    with pytest.raises(errors.InvalidRequest, match="no file"):
        store.create_batch("/v1/embeddings", "file-missing", "24h", None)
    upload = store.add_file("a.jsonl", "batch", batch_file(1))
    store.delete_file(upload["id"])
    with pytest.raises(errors.InvalidRequest, match="no file"):
        store.create_batch("/v1/embeddings", upload["id"], "24h", None)


def test_lists_page_newest_first_after_a_cursor(database):
    clock = Clock()
    store = make_store(database, clock)
    ids = []
    for n in range(5):
        clock.now += 1
        ids.append(store.add_file(f"{n}.jsonl", "batch", b"{}")["id"])
    first_page = store.files("batch", None, 2, True)
    assert [record["id"] for record in first_page] == ids[::-1][:2]
    assert [record["id"] for record in store.files("batch", first_page[-1]["id"], 10, True)] == ids[::-1][2:]
    assert [record["id"] for record in store.files(None, ids[1], 10, False)] == ids[2:]


# Tenants: files and batches are their tenant's, within its limits

ACME, GLOBEX = Tenant(name="acme"), Tenant(name="globex")


def tenant_batch(store: JobStore, count: int, tenant: Tenant) -> tuple[str, str]:
    """(input file id, batch id): `tenant`'s batch of `count` lines, not validated yet."""
    upload = store.add_file("in.jsonl", "batch", batch_file(count), tenant)
    store.clock.now += 1  # type: ignore[attr-defined]  # each batch younger than the last: claims take the oldest
    return upload["id"], store.create_batch("/v1/embeddings", upload["id"], "24h", None, tenant)["id"]


def test_files_and_batches_are_seen_and_changed_by_their_tenant_only(database):
    store = make_store(database, Clock())
    file_id, batch_id = tenant_batch(store, 2, ACME)
    record = store.file(file_id, ACME)
    assert (record["tenant"], record["lines"]) == ("acme", 2)
    assert store.file(file_id, GLOBEX) is None and store.file(file_id, OPEN) is None
    assert store.file(file_id)["id"] == file_id  # the worker's view: every tenant's
    assert [r["id"] for r in store.files(None, None, 10, True, ACME)] == [file_id]
    assert store.files(None, None, 10, True, GLOBEX) == [] and store.files("batch", None, 10, False, OPEN) == []
    assert not store.delete_file(file_id, GLOBEX) and store.file(file_id) is not None
    with pytest.raises(errors.InvalidRequest, match="no file"):  # another's file is as an unknown one
        store.create_batch("/v1/embeddings", file_id, "24h", None, GLOBEX)
    assert store.batch(batch_id, ACME)["tenant"] == "acme"
    assert store.batch(batch_id, GLOBEX) is None and store.batches(None, 10, GLOBEX) == []
    assert [b["id"] for b in store.batches(None, 10, ACME)] == [b["id"] for b in store.batches(None, 10)]
    assert store.cancel(batch_id, GLOBEX) is None and store.batch(batch_id)["status"] == "validating"
    assert store.cancel(batch_id, ACME)["status"] == "cancelling"
    assert store.delete_file(file_id, ACME) and store.file(file_id) is None


def test_a_batch_runs_as_its_tenant_and_its_output_files_are_its_own(database):
    store = make_store(database, Clock(), chunk_lines=10)
    file_id, batch_id = tenant_batch(store, 3, ACME)
    assert StepLeases(store).claim_step("v")["id"] == batch_id
    parsed, problems = parse_batch_file(StepLeases(store).upload_bytes(file_id), "/v1/embeddings", 1000)
    StepLeases(store).validated(batch_id, "v", parsed, problems)
    chunk = ChunkLeases(store).claim_chunk("w")
    assert chunk.tenant == "acme"
    assert ChunkLeases(store).store_chunk(chunk, "w", answers(chunk))
    assert StepLeases(store).claim_step("f")["id"] == batch_id and StepLeases(store).finalizing(batch_id, "f")
    StepLeases(store).finish(batch_id, "f", "finalizing", "completed")
    output_id = store.batch(batch_id, ACME)["output_file_id"]
    assert store.file(output_id, ACME)["tenant"] == "acme" and store.file(output_id, OPEN) is None
    assert {r["id"] for r in store.files(None, None, 10, True, ACME)} == {file_id, output_id}
    # The tenant's stored bytes are its uploads' and its outputs'.
    held = store.file(file_id)["bytes"] + store.file(output_id)["bytes"]
    capped = Tenant(name="acme", max_stored_bytes=held + 10)
    with pytest.raises(
        errors.InvalidRequest, match=f"API key 'acme' may keep {held + 10} bytes of files and holds {held}"
    ):
        store.add_file("more.jsonl", "batch", b"x" * 11, capped)
    store.add_file("more.jsonl", "batch", b"x" * 10, capped)


def test_a_tenants_stored_bytes_are_capped_apart_from_others(database):
    store = make_store(database, Clock(), max_stored_bytes=10_000)
    capped = Tenant(name="acme", max_stored_bytes=1000)
    first = store.add_file("a.jsonl", "batch", b"x" * 600, capped)
    with pytest.raises(errors.InvalidRequest, match="may keep 1000 bytes of files and holds 600") as refused:
        store.add_file("b.jsonl", "batch", b"x" * 600, capped)
    assert refused.value.param == "file"
    store.add_file("c.jsonl", "batch", b"x" * 600, GLOBEX)  # another tenant's files do not count
    store.add_file("d.jsonl", "batch", b"x" * 600)
    store.add_file("e.jsonl", "batch", b"x" * 400, capped)  # exactly its cap
    assert store.delete_file(first["id"], capped)
    store.add_file("b.jsonl", "batch", b"x" * 600, capped)
    with pytest.raises(errors.InvalidRequest, match="jobs.max_stored_bytes"):  # the deployment's cap still holds
        store.add_file("big.jsonl", "batch", b"x" * 8000, GLOBEX)


def test_a_tenants_unfinished_batches_are_capped_in_lines(database):
    clock = Clock()
    store = make_store(database, clock)
    capped = Tenant(name="acme", max_queued_lines=5)
    _, first = tenant_batch(store, 3, capped)
    clock.now += 1  # the batches below are younger
    three = store.add_file("three.jsonl", "batch", batch_file(3), capped)
    with pytest.raises(
        errors.InvalidRequest, match="may have 5 lines in unfinished batches and has 3; this file adds 3"
    ) as refused:
        store.create_batch("/v1/embeddings", three["id"], "24h", None, capped)
    assert refused.value.param == "input_file_id"
    two = store.add_file("two.jsonl", "batch", (batch_file(2).decode() + "\n").encode(), capped)  # final newline
    assert store.file(two["id"])["lines"] == 2
    store.create_batch("/v1/embeddings", two["id"], "24h", None, capped)  # 3 + 2: exactly the cap
    for other in (GLOBEX, OPEN):  # other tenants' lines are their own
        upload = store.add_file("other.jsonl", "batch", batch_file(9), other)
        store.create_batch("/v1/embeddings", upload["id"], "24h", None, other)
    with pytest.raises(errors.InvalidRequest, match="has 5"):
        store.create_batch(
            "/v1/embeddings", store.add_file("one", "batch", batch_file(1), capped)["id"], "24h", None, capped
        )
    assert StepLeases(store).claim_step("v")["id"] == first  # the oldest: its validation fails, and it is finished
    StepLeases(store).validated(first, "v", None, [{"code": "invalid", "message": "no", "param": None, "line": 1}])
    assert store.batch(first)["status"] == "failed"
    store.create_batch("/v1/embeddings", three["id"], "24h", None, capped)  # 2 + 3


def test_a_store_made_before_tenants_gets_their_columns(database):
    clock = Clock()
    old = make_store(database, clock)
    upload = old.add_file("old.jsonl", "batch", batch_file(2))
    batch_id = old.create_batch("/v1/embeddings", upload["id"], "24h", None)["id"]
    with old.engine.begin() as conn:  # the tables as the first release made them
        for table, column in schema.ADDED_COLUMNS:
            conn.execute(text(f"ALTER TABLE {table.name} DROP COLUMN {column}"))
    assert "tenant" not in {c["name"] for c in inspect(old.engine).get_columns("embento_files")}
    old.engine.dispose()
    old.reader.dispose()
    store = make_store(database, clock)
    assert store.file(upload["id"], ACME) is None
    record = store.file(upload["id"], OPEN)  # rows from before tenants are default's
    assert record["tenant"] is None and record["lines"] is None
    assert store.batch(batch_id, OPEN)["id"] == batch_id and store.batch(batch_id, ACME) is None
    for table, column in schema.ADDED_COLUMNS:
        assert column in {c["name"] for c in inspect(store.engine).get_columns(table.name)}
    capped = Tenant(name="default", max_queued_lines=10)  # an old file's lines are unknown: counted as none
    store.create_batch("/v1/embeddings", upload["id"], "24h", None, capped)
    file_id, new_batch = tenant_batch(store, 1, ACME)
    assert store.batch(new_batch, ACME)["tenant"] == "acme"
    again = make_store(database, clock)  # the columns are there: nothing to add
    assert again.file(file_id, ACME)["lines"] == 1
