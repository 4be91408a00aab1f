"""The jobs' state, through SQLAlchemy: SQLite in a data folder by default, PostgreSQL for many replicas.

Every write is one transaction, committed before it is acknowledged. Work is claimed under a lease: a chunk
(or a batch's validation or finalization) belongs to one worker until its lease runs out, and a result is
stored only by the worker that still holds its chunk, so a chunk whose worker died is run again by another and
each line is answered once. On PostgreSQL claims skip rows another replica has locked (`FOR UPDATE SKIP
LOCKED`); on SQLite every write transaction begins `IMMEDIATE`, one writer at a time across processes.

The methods block: callers run them in a thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    or_,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError

from config import errors
from config.keys_file import DEFAULT_TENANT, Tenant
from config.settings import JobSettings
from gateway.jobs import schema
from gateway.jobs.blobs import Blobs, DatabaseBlobs, FolderBlobs
from gateway.jobs.lines import BatchLine
from gateway.tenants.keys import OPEN

Clock = Callable[[], float]
FINISHED = ("completed", "failed", "expired", "cancelled")
OUTPUT_PAGE_LINES = 500  # an output file is read this many lines per query
BATCH_WINDOW_S = {"24h": 24 * 3600}


@dataclass(frozen=True)
class Chunk:
    """Lines of one batch claimed by a worker."""

    batch_id: str
    endpoint: str
    first_line: int
    lines: list[BatchLine]
    tenant: str  # whose batch it is


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


class JobStore:
    def __init__(self, settings: JobSettings, data_dir: Path, clock: Clock = time.time) -> None:
        self.settings = settings
        self.clock = clock
        url = settings.database()
        if url:
            self.engine = create_engine(_psycopg(url), pool_pre_ping=True)
            self.reader = self.engine
            self.blobs: Blobs = DatabaseBlobs()
        else:
            self.engine = _sqlite(data_dir / "jobs.db", immediate=True)
            self.reader = _sqlite(data_dir / "jobs.db", immediate=False)
            self.blobs = FolderBlobs(data_dir / "files")
        self._created = False

    def create_schema(self) -> None:
        """The tables, once: replicas and workers starting together each try."""
        if self._created:
            return
        if self.engine.dialect.name == "sqlite":  # made on first use: not by every process that imports the service
            database = self.engine.url.database
            assert database is not None  # a file: _sqlite's URL names one
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":  # create_all checks, then creates: one process at a time
                conn.execute(text("SELECT pg_advisory_xact_lock(7310601)"))
                schema.metadata.create_all(conn)
                # Read in pieces (DatabaseBlobs): uncompressed, a piece is read without the whole value.
                conn.execute(text("ALTER TABLE embento_file_contents ALTER COLUMN content SET STORAGE EXTERNAL"))
            else:
                schema.metadata.create_all(conn)
            _add_columns(conn)
        self._created = True

    def _now(self) -> int:
        return int(self.clock())

    def _now_us(self) -> int:
        return int(self.clock() * 1e6)

    # Files: each its tenant's, the only one that sees it
    def add_file(self, filename: str, purpose: str, content: bytes, tenant: Tenant = OPEN) -> dict[str, Any]:
        self.create_schema()
        now = self._now()
        record: dict[str, Any] = {
            "id": new_id("file-"),
            "purpose": purpose,
            "filename": filename,
            "bytes": len(content),
            "created_at": now,
            "created_us": self._now_us(),
            "expires_at": now + self.settings.retention_s,
            "batch_id": None,
            "succeeded": None,
            "tenant": tenant.name,
            "lines": content.count(b"\n") + (bool(content) and not content.endswith(b"\n")),
        }
        with self.engine.begin() as conn:
            _one_creator_at_a_time(conn)
            stored_bytes = select(func.coalesce(func.sum(schema.files.c.bytes), 0))
            stored = conn.execute(stored_bytes).scalar_one()
            if stored + len(content) > self.settings.max_stored_bytes:
                raise errors.InvalidRequest(
                    f"the deployment keeps at most {self.settings.max_stored_bytes} bytes of files "
                    f"(jobs.max_stored_bytes) and holds {stored}; delete files or wait for them to expire",
                    param="file",
                )
            if tenant.max_stored_bytes is not None:
                own = conn.execute(stored_bytes.where(_owned(schema.files, tenant))).scalar_one()
                if own + len(content) > tenant.max_stored_bytes:
                    raise errors.InvalidRequest(
                        f"API key '{tenant.name}' may keep {tenant.max_stored_bytes} bytes of files and holds {own}; "
                        "delete files or wait for them to expire",
                        param="file",
                    )
            conn.execute(insert(schema.files).values(record))
            self.blobs.write(conn, record["id"], content)  # before the commit: no row without its bytes
        return record

    def file(self, file_id: str, tenant: Tenant | None = None) -> dict[str, Any] | None:
        self.create_schema()
        with self.reader.connect() as conn:
            row = conn.execute(
                select(schema.files).where(schema.files.c.id == file_id, _owned(schema.files, tenant))
            ).first()
        return dict(row._mapping) if row else None

    def files(
        self, purpose: str | None, after: str | None, limit: int, descending: bool, tenant: Tenant | None = None
    ) -> list[dict[str, Any]]:
        self.create_schema()
        query = select(schema.files).where(_owned(schema.files, tenant))
        if purpose:
            query = query.where(schema.files.c.purpose == purpose)
        return self._page(query, schema.files, after, limit, descending)

    def _page(self, query: Any, table: Any, after: str | None, limit: int, descending: bool) -> list[dict]:
        """Rows by creation (then id), those past the `after` id's row."""
        order = (table.c.created_us.desc(), table.c.id.desc()) if descending else (table.c.created_us, table.c.id)
        with self.reader.connect() as conn:
            anchor = after and conn.execute(select(table.c.created_us).where(table.c.id == after)).scalar()
            if anchor is not None:
                position, cursor = tuple_(table.c.created_us, table.c.id), tuple_(anchor, after)
                query = query.where(position < cursor if descending else position > cursor)
            rows = conn.execute(query.order_by(*order).limit(limit)).all()
        return [dict(row._mapping) for row in rows]

    def delete_file(self, file_id: str, tenant: Tenant | None = None) -> bool:
        self.create_schema()
        with self.engine.begin() as conn:
            owned = conn.execute(
                select(schema.files.c.id).where(schema.files.c.id == file_id, _owned(schema.files, tenant))
            ).first()
            return owned is not None and self._delete_files(conn, [file_id]) > 0

    def _delete_files(self, conn: Connection, file_ids: list[str]) -> int:
        """Files and what they hold: an upload's bytes, an output's results."""
        rows = conn.execute(select(schema.files).where(schema.files.c.id.in_(file_ids))).all()
        for row in rows:
            if row.batch_id is not None:
                conn.execute(
                    delete(schema.results).where(
                        schema.results.c.batch_id == row.batch_id, schema.results.c.succeeded == row.succeeded
                    )
                )
            else:
                self.blobs.delete(conn, row.id)
        conn.execute(delete(schema.files).where(schema.files.c.id.in_(file_ids)))
        return len(rows)

    def content(self, record: dict[str, Any]) -> Iterator[bytes]:
        """A file's bytes, in pieces: an upload's as stored, an output's line by line."""
        if record["batch_id"] is None:
            yield from self.blobs.read(self.reader, record["id"])
            return
        after = 0
        while True:
            with self.reader.connect() as conn:
                page = conn.execute(
                    select(schema.results.c.line, schema.results.c.output)
                    .where(
                        schema.results.c.batch_id == record["batch_id"],
                        schema.results.c.succeeded == record["succeeded"],
                        schema.results.c.line > after,
                    )
                    .order_by(schema.results.c.line)
                    .limit(OUTPUT_PAGE_LINES)
                ).all()
            if not page:
                return
            yield "".join(f"{row.output}\n" for row in page).encode()
            after = page[-1].line

    # Batches
    def create_batch(
        self,
        endpoint: str,
        input_file_id: str,
        completion_window: str,
        metadata: dict[str, str] | None,
        tenant: Tenant = OPEN,
    ) -> dict[str, Any]:
        self.create_schema()
        now = self._now()
        record: dict[str, Any] = {
            "id": new_id("batch_"),
            "endpoint": endpoint,
            "input_file_id": input_file_id,
            "completion_window": completion_window,
            "metadata": metadata,
            "status": "validating",
            "tenant": tenant.name,
            "errors": None,
            "total": 0,
            "completed": 0,
            "failed": 0,
            "created_at": now,
            "created_us": self._now_us(),
            "expires_at": now + BATCH_WINDOW_S[completion_window],
        }
        with self.engine.begin() as conn:
            _one_creator_at_a_time(conn)
            source = conn.execute(
                select(schema.files).where(schema.files.c.id == input_file_id, _owned(schema.files, tenant))
            ).first()
            if source is None:
                raise errors.InvalidRequest(
                    f"no file '{input_file_id}' (unknown, expired or deleted)", param="input_file_id"
                )
            if source.purpose != "batch" or source.batch_id is not None:
                raise errors.InvalidRequest(
                    f"file '{input_file_id}' was not uploaded with purpose 'batch'", param="input_file_id"
                )
            if tenant.max_queued_lines is not None:
                self._check_queued_lines(conn, tenant, source.lines or 0)
            conn.execute(insert(schema.batches).values(record))
        batch = self.batch(record["id"], tenant)
        assert batch is not None  # inserted just now
        return batch

    @staticmethod
    def _check_queued_lines(conn: Connection, tenant: Tenant, adding: int) -> None:
        """A batch whose lines would take its tenant's unfinished ones past `max_queued_lines` is refused."""
        b, f = schema.batches.c, schema.files.c
        queued = conn.execute(
            select(func.coalesce(func.sum(f.lines), 0))
            .select_from(schema.batches.join(schema.files, f.id == b.input_file_id))
            .where(
                _owned(schema.batches, tenant), b.status.in_(("validating", "in_progress", "finalizing", "cancelling"))
            )
        ).scalar_one()
        if queued + adding > (tenant.max_queued_lines or 0):
            raise errors.InvalidRequest(
                f"API key '{tenant.name}' may have {tenant.max_queued_lines} lines in unfinished batches and has "
                f"{queued}; this file adds {adding}",
                param="input_file_id",
            )

    def batch(self, batch_id: str, tenant: Tenant | None = None) -> dict[str, Any] | None:
        self.create_schema()
        with self.reader.connect() as conn:
            row = conn.execute(
                select(schema.batches).where(schema.batches.c.id == batch_id, _owned(schema.batches, tenant))
            ).first()
        return dict(row._mapping) if row else None

    def batches(self, after: str | None, limit: int, tenant: Tenant | None = None) -> list[dict[str, Any]]:
        self.create_schema()
        return self._page(
            select(schema.batches).where(_owned(schema.batches, tenant)), schema.batches, after, limit, descending=True
        )

    def cancel(self, batch_id: str, tenant: Tenant | None = None) -> dict[str, Any] | None:
        """A batch not finished stops taking new chunks; its workers finish theirs, then it is cancelled."""
        self.create_schema()
        with self.engine.begin() as conn:
            conn.execute(
                update(schema.batches)
                .where(
                    schema.batches.c.id == batch_id,
                    _owned(schema.batches, tenant),
                    schema.batches.c.status.in_(("validating", "in_progress")),
                )
                .values(status="cancelling", cancelling_at=self._now(), lease_owner=None, lease_until=None)
            )
        return self.batch(batch_id, tenant)

    # The worker's side
    def claim_step(self, owner: str) -> dict[str, Any] | None:
        """A batch with a step due (its id, status and expires_at), leased to `owner`: one to validate, one whose
        chunks are all stored (to finalize), one cancelling with no chunk running, one past its window, or one
        whose finalizer died."""
        self.create_schema()
        now = self.clock()
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
        with self.engine.begin() as conn:
            row = conn.execute(query).first()
            if row is None:
                return None
            conn.execute(
                update(schema.batches)
                .where(c.id == row.id)
                .values(lease_owner=owner, lease_until=now + self.settings.lease_s)
            )
        return dict(row._mapping)

    def validated(
        self, batch_id: str, owner: str, parsed: list[BatchLine] | None, problems: list[dict[str, Any]]
    ) -> None:
        """A validated batch's lines and chunks, now in progress; or its problems, and it has failed."""
        c = schema.batches.c
        with self.engine.begin() as conn:
            if not self._holds(conn, batch_id, owner, "validating"):
                return
            if problems or not parsed:
                conn.execute(
                    update(schema.batches)
                    .where(c.id == batch_id)
                    .values(status="failed", failed_at=self._now(), errors=problems, lease_owner=None, lease_until=None)
                )
                return
            conn.execute(
                insert(schema.lines),
                [
                    {"batch_id": batch_id, "line": line.number, "custom_id": line.custom_id, "body": line.body}
                    for line in parsed
                ],
            )
            size = self.settings.chunk_lines
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
                    in_progress_at=self._now(),
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
        source = self.file(file_id)
        return b"".join(self.content(source)) if source else None

    def finalizing(self, batch_id: str, owner: str) -> bool:
        """Every chunk is stored: the batch is finalizing (its output files are made next)."""
        with self.engine.begin() as conn:
            if not self._holds(conn, batch_id, owner, "in_progress"):
                return False
            conn.execute(
                update(schema.batches)
                .where(schema.batches.c.id == batch_id)
                .values(status="finalizing", finalizing_at=self._now())
            )
        return True

    def finish(self, batch_id: str, owner: str, status: str, outcome: str) -> None:
        """The batch ends as `outcome` (completed, cancelled, expired): its output and error files made from its
        results, its lines and chunks dropped."""
        c = schema.batches.c
        now = self._now()
        with self.engine.begin() as conn:
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
                            created_us=self._now_us(),
                            tenant=owning,
                            expires_at=now + self.settings.retention_s,
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

    def claim_chunk(self, owner: str) -> Chunk | None:
        """The next chunk of a batch in progress that nobody holds, leased to `owner`."""
        self.create_schema()
        now = self.clock()
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
        with self.engine.begin() as conn:
            row = conn.execute(query).first()
            if row is None:
                return None
            conn.execute(
                update(schema.chunks)
                .where(k.batch_id == row.batch_id, k.first_line == row.first_line)
                .values(lease_owner=owner, lease_until=now + self.settings.lease_s)
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
        with self.engine.begin() as conn:
            renewed = conn.execute(
                update(schema.chunks)
                .where(
                    k.batch_id == chunk.batch_id,
                    k.first_line == chunk.first_line,
                    k.lease_owner == owner,
                    k.done.is_(False),
                )
                .values(lease_until=self.clock() + self.settings.lease_s)
            )
        return renewed.rowcount == 1

    def store_chunk(self, chunk: Chunk, owner: str, outputs: list[tuple[int, bool, str]]) -> bool:
        """A chunk's results, stored with the chunk marked done in one transaction, only while `owner` still holds
        it: False (and nothing stored) when another worker took it over."""
        k, b = schema.chunks.c, schema.batches.c
        try:
            with self.engine.begin() as conn:
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

    def expire_files(self) -> int:
        """Files past their retention, deleted; how many."""
        self.create_schema()
        with self.engine.begin() as conn:
            expired = conn.execute(select(schema.files.c.id).where(schema.files.c.expires_at <= self._now())).scalars()
            return self._delete_files(conn, list(expired))

    def counts(self) -> dict[str, int]:
        """Batches by status (the metrics' gauge)."""
        self.create_schema()
        with self.reader.connect() as conn:
            rows = conn.execute(select(schema.batches.c.status, func.count()).group_by(schema.batches.c.status))
            return {status: count for status, count in rows}


def _one_creator_at_a_time(conn: Connection) -> None:
    """Uploads and batch creations check totals (stored bytes, queued lines) and then insert: one at a time, or two
    would both pass a check that only one of them should. SQLite's write transactions are one at a time already
    (BEGIN IMMEDIATE); PostgreSQL takes a lock until the transaction ends."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(7310602)"))


def _owned(table: Any, tenant: Tenant | None) -> Any:
    """Rows of `tenant` (those from before tenants are `default`'s); every row for None (the job worker)."""
    return true() if tenant is None else func.coalesce(table.c.tenant, DEFAULT_TENANT) == tenant.name


def _add_columns(conn: Connection) -> None:
    """Columns added since the store was made (`schema.ADDED_COLUMNS`), on a store made before them."""
    inspector = inspect(conn)
    for table, name in schema.ADDED_COLUMNS:
        if name not in {column["name"] for column in inspector.get_columns(table.name)}:
            column = table.c[name]
            conn.execute(
                text(f"ALTER TABLE {table.name} ADD COLUMN {name} {column.type.compile(dialect=conn.dialect)}")
            )


def open_store(settings: JobSettings) -> JobStore | None:
    """The configured store (nothing connects yet), or None with jobs off. SQLite's folder defaults to one under
    BentoML's home, which a container keeps on its volume."""
    if not settings.enabled:
        return None
    if settings.data_dir:
        return JobStore(settings, Path(settings.data_dir).expanduser())
    from bentoml._internal.configuration.containers import BentoMLContainer

    return JobStore(settings, Path(BentoMLContainer.bentoml_home.get()) / "embento-jobs")


def _psycopg(url: str) -> str:
    """A `postgresql://` URL through psycopg 3 (SQLAlchemy's default PostgreSQL driver is psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _sqlite(path: Path, immediate: bool) -> Engine:
    """SQLite in WAL mode (readers do not wait for the writer), durable across a process kill; with `immediate`,
    every transaction takes the write lock at its start, so a read-then-write claim is atomic across processes."""
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's own BEGIN below, not the driver's
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine
