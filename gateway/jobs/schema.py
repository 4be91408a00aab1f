"""The jobs' durable state: one schema, on SQLite (one server) or PostgreSQL (many replicas).

A batch's input lines are copied into `lines` when it is validated, cut into `chunks` that workers claim under
a lease, and each line's answer lands in `results` in the same transaction that marks its chunk done: a chunk's
results are stored whole and once. Output and error files are views of `results` (ordered by line), so a
cancelled or expired batch's partial output is readable as soon as its chunks are stored.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

files = Table(
    "embento_files",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("purpose", String(32), nullable=False),
    Column("filename", Text, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("created_us", BigInteger, nullable=False),  # lists' order: many are created within a second
    Column("expires_at", BigInteger, nullable=False),
    Column("batch_id", String(40)),  # an output or error file: its batch's results,
    Column("succeeded", Boolean),  # the lines answered 2xx (output) or the others (error)
    Column("tenant", String(64)),  # whose it is (the API key's tenant); NULL in stores from before tenants: default's
    Column("lines", Integer),  # an upload's lines: counted against its tenant's max_queued_lines
)

# An uploaded file's bytes, on PostgreSQL (on SQLite they are a file in the data folder).
file_contents = Table(
    "embento_file_contents",
    metadata,
    Column("file_id", String(40), ForeignKey("embento_files.id", ondelete="CASCADE"), primary_key=True),
    Column("content", LargeBinary, nullable=False),
)

# A batch's moments, in OpenAI's field names (epoch seconds): its columns, and the batch object's fields.
BATCH_TIMES: Final = (
    "created_at",
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)
batches = Table(
    "embento_batches",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("endpoint", String(64), nullable=False),
    Column("input_file_id", String(40), nullable=False),
    Column("completion_window", String(16), nullable=False),
    Column("metadata", JSON),
    Column("status", String(16), nullable=False),
    Column("tenant", String(64)),  # as the files'
    Column("errors", JSON),  # validation errors: [{code, message, param, line}]
    Column("total", Integer, nullable=False, default=0),
    Column("completed", Integer, nullable=False, default=0),
    Column("failed", Integer, nullable=False, default=0),
    Column("output_file_id", String(40)),
    Column("error_file_id", String(40)),
    Column("created_us", BigInteger, nullable=False),
    *(Column(name, BigInteger) for name in BATCH_TIMES),
    # Who validates or finalizes it now, and until when (a dead worker's step is taken over after that).
    Column("lease_owner", String(80)),
    Column("lease_until", Float),
    Index("embento_batches_by_status", "status"),
)

lines = Table(
    "embento_batch_lines",
    metadata,
    Column("batch_id", String(40), primary_key=True),
    Column("line", Integer, primary_key=True),  # 1-based, as the file's line numbers
    Column("custom_id", Text, nullable=False),
    Column("body", Text, nullable=False),  # the request body, JSON
)

chunks = Table(
    "embento_batch_chunks",
    metadata,
    Column("batch_id", String(40), primary_key=True),
    Column("first_line", Integer, primary_key=True),
    Column("end_line", Integer, nullable=False),  # exclusive
    Column("done", Boolean, nullable=False, default=False),
    Column("lease_owner", String(80)),
    Column("lease_until", Float),
    Index("embento_chunks_open", "done", "batch_id"),
)

results = Table(
    "embento_batch_results",
    metadata,
    Column("batch_id", String(40), primary_key=True),
    Column("line", Integer, primary_key=True),
    Column("succeeded", Boolean, nullable=False),
    Column("output", Text, nullable=False),  # the output file's line, JSON
    Column("size", Integer, nullable=False),  # its bytes in the file, newline included
)


# Columns added since the first release, added to an older store's tables when it is opened: (table, column).
ADDED_COLUMNS = ((files, "tenant"), (files, "lines"), (batches, "tenant"))
