"""The job worker's side of the store: work claimed under leases (`StepLeases`, `ChunkLeases`). A batch's step
(validate, finalize, cancel, expire) or a chunk of its lines belongs to one worker until its lease runs out, and a
chunk's results are stored only by the worker that still holds it, so a chunk whose worker died is run again by
another and each line is answered once (gateway/jobs/store.py has the transactions' rules). The methods block:
callers run them in a thread.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from config.keys_file import DEFAULT_TENANT
from gateway.jobs import schema
from gateway.jobs.lines import BatchLine
from gateway.jobs.records import Chunk, Step
from gateway.jobs.store import JobStore, new_id


class StepLeases:
    """A batch's steps under leases (validate, finalize, cancel, expire), and the worker's housekeeping, on
    `store`'s database."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def claim_step(self, owner: str) -> Step | None:
        """A batch with a step due (its id, status and expires_at), leased to `owner`: one to validate, one whose
        chunks are all stored (to finalize), one cancelling with no chunk running, one past its window, or one
        whose finalizer died."""
        self.store.create_schema()
        now = self.store.clock()
        c, k = schema.batches.c, schema.chunks.c
        open_chunk = select(schema.chunks).where(k.batch_id == c.id, k.done.is_(False))
        running_chunk = open_chunk.where(k.lease_until >= now)
        due = or_(
            c.status.in_(("validating", "finalizing")),
            and_(c.status == "in_progress", ~open_chunk.exists()),
            and_(c.status == "cancelling", ~running_chunk.exists()),
            and_(c.status.in_(("validating", "in_progress")), c.expires_at <= int(now)),
        )
        query = (
            select(c.id, c.status, c.expires_at)
            .where(due, or_(c.lease_until.is_(None), c.lease_until < now))
            .order_by(c.created_at)
            .limit(1)
            .with_for_update(skip_locked=True, of=schema.batches)
        )
        with self.store.engine.begin() as conn:
            row = conn.execute(query).first()
            if row is None:
                return None
            conn.execute(
                update(schema.batches)
                .where(c.id == row.id)
                .values(lease_owner=owner, lease_until=now + self.store.settings.lease_s)
            )
        return Step(id=row.id, status=row.status, expires_at=row.expires_at)

    def validated(
        self, batch_id: str, owner: str, parsed: list[BatchLine] | None, problems: list[dict[str, Any]]
    ) -> None:
        """A validated batch's lines and chunks, now in progress; or its problems, and it has failed."""
        c = schema.batches.c
        with self.store.engine.begin() as conn:
            if not self._holds(conn, batch_id, owner, "validating"):
                return
            if problems or not parsed:
                conn.execute(
                    update(schema.batches)
                    .where(c.id == batch_id)
                    .values(
                        status="failed", failed_at=self.store.now(), errors=problems, lease_owner=None, lease_until=None
                    )
                )
                return
            conn.execute(
                insert(schema.lines),
                [
                    {"batch_id": batch_id, "line": line.number, "custom_id": line.custom_id, "body": line.body}
                    for line in parsed
                ],
            )
            size = self.store.settings.chunk_lines
            conn.execute(
                insert(schema.chunks),
                [
                    {
                        "batch_id": batch_id,
                        "first_line": parsed[i].number,
                        "done": False,
                        "end_line": parsed[min(i + size, len(parsed)) - 1].number + 1,
                    }
                    for i in range(0, len(parsed), size)
                ],
            )
            conn.execute(
                update(schema.batches)
                .where(c.id == batch_id)
                .values(
                    status="in_progress",
                    in_progress_at=self.store.now(),
                    total=len(parsed),
                    lease_owner=None,
                    lease_until=None,
                )
            )

    def _holds(self, conn: Connection, batch_id: str, owner: str, status: str) -> bool:
        c = schema.batches.c
        row = conn.execute(select(c.status, c.lease_owner).where(c.id == batch_id)).first()
        return row is not None and row.status == status and row.lease_owner == owner

    def upload_bytes(self, file_id: str) -> bytes | None:
        """An uploaded file, whole; None once deleted."""
        source = self.store.file(file_id)
        return b"".join(self.store.content(source)) if source else None

    def finalizing(self, batch_id: str, owner: str) -> bool:
        """Every chunk is stored: the batch is finalizing (its output files are made next)."""
        with self.store.engine.begin() as conn:
            if not self._holds(conn, batch_id, owner, "in_progress"):
                return False
            conn.execute(
                update(schema.batches)
                .where(schema.batches.c.id == batch_id)
                .values(status="finalizing", finalizing_at=self.store.now())
            )
        return True

    def finish(self, batch_id: str, owner: str, status: str, outcome: str) -> None:
        """The batch ends as `outcome` (completed, cancelled, expired): its output and error files made from its
        results, its lines and chunks dropped."""
        c = schema.batches.c
        now = self.store.now()
        with self.store.engine.begin() as conn:
            if not self._holds(conn, batch_id, owner, status):
                return
            file_ids: dict[bool, str | None] = {}
            owning = conn.execute(select(c.tenant).where(c.id == batch_id)).scalar()
            for succeeded in (True, False):
                size, count = conn.execute(
                    select(func.coalesce(func.sum(schema.results.c.size), 0), func.count()).where(
                        schema.results.c.batch_id == batch_id, schema.results.c.succeeded == succeeded
                    )
                ).one()
                file_ids[succeeded] = None
                if count:
                    file_ids[succeeded] = new_id("file-")
                    conn.execute(
                        insert(schema.files).values(
                            id=file_ids[succeeded],
                            purpose="batch_output",
                            bytes=size,
                            created_at=now,
                            created_us=self.store.now_us(),
                            tenant=owning,
                            expires_at=now + self.store.settings.retention_s,
                            batch_id=batch_id,
                            succeeded=succeeded,
                            filename=f"{batch_id}_{'output' if succeeded else 'error'}.jsonl",
                        )
                    )
            conn.execute(
                update(schema.batches)
                .where(c.id == batch_id)
                .values(
                    {
                        "status": outcome,
                        f"{outcome}_at": now,
                        "output_file_id": file_ids[True],
                        "error_file_id": file_ids[False],
                        "lease_owner": None,
                        "lease_until": None,
                    }
                )
            )
            conn.execute(delete(schema.lines).where(schema.lines.c.batch_id == batch_id))
            conn.execute(delete(schema.chunks).where(schema.chunks.c.batch_id == batch_id))

    def expire_files(self) -> int:
        """Files past their retention, deleted; how many."""
        self.store.create_schema()
        with self.store.engine.begin() as conn:
            expired = conn.execute(
                select(schema.files.c.id).where(schema.files.c.expires_at <= self.store.now())
            ).scalars()
            return self.store.delete_files(conn, list(expired))

    def counts(self) -> dict[str, int]:
        """Batches by status (the metrics' gauge)."""
        self.store.create_schema()
        with self.store.reader.connect() as conn:
            rows = conn.execute(select(schema.batches.c.status, func.count()).group_by(schema.batches.c.status))
            return {status: count for status, count in rows}


class ChunkLeases:
    """Chunks of a batch's lines under leases: claimed, renewed while they run, and their results stored by the
    worker that still holds them, on `store`'s database."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def claim_chunk(self, owner: str) -> Chunk | None:
        """The next chunk of a batch in progress that nobody holds, leased to `owner`."""
        self.store.create_schema()
        now = self.store.clock()
        b, k, ln = schema.batches.c, schema.chunks.c, schema.lines.c
        query = (
            select(k.batch_id, k.first_line, k.end_line, b.endpoint, b.tenant)
            .join(schema.batches, b.id == k.batch_id)
            .where(
                b.status == "in_progress",
                b.expires_at > int(now),
                k.done.is_(False),
                or_(k.lease_until.is_(None), k.lease_until < now),
            )
            .order_by(b.created_at, k.first_line)
            .limit(1)
            .with_for_update(skip_locked=True, of=schema.chunks)
        )
        with self.store.engine.begin() as conn:
            row = conn.execute(query).first()
            if row is None:
                return None
            conn.execute(
                update(schema.chunks)
                .where(k.batch_id == row.batch_id, k.first_line == row.first_line)
                .values(lease_owner=owner, lease_until=now + self.store.settings.lease_s)
            )
            found = conn.execute(
                select(ln.line, ln.custom_id, ln.body)
                .where(ln.batch_id == row.batch_id, ln.line >= row.first_line, ln.line < row.end_line)
                .order_by(ln.line)
            ).all()
        return Chunk(
            row.batch_id,
            row.endpoint,
            row.first_line,
            [BatchLine(line.line, line.custom_id, line.body) for line in found],
            row.tenant or DEFAULT_TENANT,
        )

    def renew(self, chunk: Chunk, owner: str) -> bool:
        """The chunk's lease extended; False when another worker has taken it over."""
        k = schema.chunks.c
        with self.store.engine.begin() as conn:
            renewed = conn.execute(
                update(schema.chunks)
                .where(
                    k.batch_id == chunk.batch_id,
                    k.first_line == chunk.first_line,
                    k.lease_owner == owner,
                    k.done.is_(False),
                )
                .values(lease_until=self.store.clock() + self.store.settings.lease_s)
            )
        return renewed.rowcount == 1

    def store_chunk(self, chunk: Chunk, owner: str, outputs: list[tuple[int, bool, str]]) -> bool:
        """A chunk's results, stored with the chunk marked done in one transaction, only while `owner` still holds
        it: False (and nothing stored) when another worker took it over."""
        k, b = schema.chunks.c, schema.batches.c
        try:
            with self.store.engine.begin() as conn:
                done = conn.execute(
                    update(schema.chunks)
                    .where(
                        k.batch_id == chunk.batch_id,
                        k.first_line == chunk.first_line,
                        k.lease_owner == owner,
                        k.done.is_(False),
                    )
                    .values(done=True, lease_owner=None, lease_until=None)
                )
                if done.rowcount != 1:
                    conn.rollback()
                    return False
                conn.execute(
                    insert(schema.results),
                    [
                        {
                            "batch_id": chunk.batch_id,
                            "line": line,
                            "succeeded": ok,
                            "output": output,
                            "size": len(output.encode()) + 1,
                        }
                        for line, ok, output in outputs
                    ],
                )
                succeeded = sum(ok for _, ok, _ in outputs)
                conn.execute(
                    update(schema.batches)
                    .where(b.id == chunk.batch_id)
                    .values(completed=b.completed + succeeded, failed=b.failed + len(outputs) - succeeded)
                )
        except IntegrityError:  # stored already by a worker that held it before: answered once
            return False
        return True
