"""The jobs' state, through SQLAlchemy: SQLite in a data folder by default, PostgreSQL for many replicas.

Every write is one transaction, committed before it is acknowledged. Work is claimed under a lease: a chunk
(or a batch's validation or finalization) belongs to one worker until its lease runs out, and a result is
stored only by the worker that still holds its chunk, so a chunk whose worker died is run again by another and
each line is answered once. On PostgreSQL claims skip rows another replica has locked (`FOR UPDATE SKIP
LOCKED`); on SQLite every write transaction begins `IMMEDIATE`, one writer at a time across processes.

This module is the API's side (files and batches, each its tenant's); `gateway/jobs/leases.py` the job workers'
(claims under leases and results). The methods block: callers run them in a thread (`asyncio.to_thread`).

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): the stored bytes and
queued lines a file or batch would add, and the batch's input file, are read in the transaction that stores it, so
two requests at once cannot both pass.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    select,
    text,
    true,
    tuple_,
    update,
)

from config import errors
from config.keys_file import DEFAULT_TENANT, Tenant
from config.settings import JobSettings
from gateway.jobs import schema
from gateway.jobs.blobs import Blobs, DatabaseBlobs, FolderBlobs
from gateway.jobs.records import BatchRecord, FileRecord
from gateway.tenants.keys import OPEN

Clock = Callable[[], float]
FINISHED = ("completed", "failed", "expired", "cancelled")
OUTPUT_PAGE_LINES = 500  # an output file is read this many lines per query
BATCH_WINDOW_S = {"24h": 24 * 3600}


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


class JobStore:
    """Files and batches in the configured database, with what both sides share (the schema, the clock)."""

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

    def now(self) -> int:
        return int(self.clock())

    def now_us(self) -> int:
        return int(self.clock() * 1e6)

    # Files: each its tenant's, the only one that sees it
    def add_file(self, filename: str, purpose: str, content: bytes, tenant: Tenant = OPEN) -> FileRecord:
        self.create_schema()
        now = self.now()
        record: FileRecord = {
            "id": new_id("file-"),
            "purpose": purpose,
            "filename": filename,
            "bytes": len(content),
            "created_at": now,
            "created_us": self.now_us(),
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

    def file(self, file_id: str, tenant: Tenant | None = None) -> FileRecord | None:
        self.create_schema()
        with self.reader.connect() as conn:
            row = conn.execute(
                select(schema.files).where(schema.files.c.id == file_id, _owned(schema.files, tenant))
            ).first()
        return _record(row) if row else None

    def files(
        self, purpose: str | None, after: str | None, limit: int, descending: bool, tenant: Tenant | None = None
    ) -> list[FileRecord]:
        self.create_schema()
        query = select(schema.files).where(_owned(schema.files, tenant))
        if purpose:
            query = query.where(schema.files.c.purpose == purpose)
        return self._page(query, schema.files, after, limit, descending)

    def _page(self, query: Any, table: Any, after: str | None, limit: int, descending: bool) -> list[Any]:
        """Rows by creation (then id), those past the `after` id's row."""
        order = (table.c.created_us.desc(), table.c.id.desc()) if descending else (table.c.created_us, table.c.id)
        with self.reader.connect() as conn:
            anchor = after and conn.execute(select(table.c.created_us).where(table.c.id == after)).scalar()
            if anchor is not None:
                position, cursor = tuple_(table.c.created_us, table.c.id), tuple_(anchor, after)
                query = query.where(position < cursor if descending else position > cursor)
            rows = conn.execute(query.order_by(*order).limit(limit)).all()
        return [_record(row) for row in rows]

    def delete_file(self, file_id: str, tenant: Tenant | None = None) -> bool:
        self.create_schema()
        with self.engine.begin() as conn:
            owned = conn.execute(
                select(schema.files.c.id).where(schema.files.c.id == file_id, _owned(schema.files, tenant))
            ).first()
            return owned is not None and self.delete_files(conn, [file_id]) > 0

    def delete_files(self, conn: Connection, file_ids: list[str]) -> int:
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

    def content(self, record: FileRecord) -> Iterator[bytes]:
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
    ) -> BatchRecord:
        self.create_schema()
        now = self.now()
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
            "created_us": self.now_us(),
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

    def batch(self, batch_id: str, tenant: Tenant | None = None) -> BatchRecord | None:
        self.create_schema()
        with self.reader.connect() as conn:
            row = conn.execute(
                select(schema.batches).where(schema.batches.c.id == batch_id, _owned(schema.batches, tenant))
            ).first()
        return _record(row) if row else None

    def batches(self, after: str | None, limit: int, tenant: Tenant | None = None) -> list[BatchRecord]:
        self.create_schema()
        return self._page(
            select(schema.batches).where(_owned(schema.batches, tenant)), schema.batches, after, limit, descending=True
        )

    def cancel(self, batch_id: str, tenant: Tenant | None = None) -> BatchRecord | None:
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
                .values(status="cancelling", cancelling_at=self.now(), lease_owner=None, lease_until=None)
            )
        return self.batch(batch_id, tenant)


def _record(row: Any) -> Any:
    """A file's or batch's row as its record (`gateway/jobs/records.py`): the row holds exactly the table's
    columns, which the record types declare."""
    return dict(row._mapping)


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
