"""An uploaded file's bytes: in the database on PostgreSQL (replicas share no disk), beside the SQLite database
in its data folder otherwise (a database of a few hundred MB of blobs would only be slower)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from sqlalchemy import Connection, Engine, delete, func, insert, select

from gateway.jobs import schema

READ_PIECE_BYTES = 1024 * 1024


class Blobs(Protocol):
    def write(self, conn: Connection, file_id: str, content: bytes) -> None:
        """In `conn`'s transaction, or durably before it commits."""
        ...

    def read(self, engine: Engine, file_id: str) -> Iterator[bytes]: ...

    def delete(self, conn: Connection, file_id: str) -> None: ...


class DatabaseBlobs:
    def write(self, conn: Connection, file_id: str, content: bytes) -> None:
        conn.execute(insert(schema.file_contents).values(file_id=file_id, content=content))

    def read(self, engine: Engine, file_id: str) -> Iterator[bytes]:
        c = schema.file_contents.c
        start = 1  # SQL's substring counts from 1
        while True:  # in pieces: a 200 MB file is not held whole for a download
            with engine.connect() as conn:
                piece = conn.execute(
                    select(func.substring(c.content, start, READ_PIECE_BYTES)).where(c.file_id == file_id)
                ).scalar()
            if not piece:
                return
            yield bytes(piece)
            start += READ_PIECE_BYTES

    def delete(self, conn: Connection, file_id: str) -> None:
        conn.execute(delete(schema.file_contents).where(schema.file_contents.c.file_id == file_id))


class FolderBlobs:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def write(self, conn: Connection, file_id: str, content: bytes) -> None:
        """Written whole and synced under a temporary name, then renamed: a kill leaves no half file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".{file_id}.partial"
        with open(partial, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        partial.rename(self.folder / file_id)

    def read(self, engine: Engine, file_id: str) -> Iterator[bytes]:
        with open(self.folder / file_id, "rb") as source:
            while piece := source.read(READ_PIECE_BYTES):
                yield piece

    def delete(self, conn: Connection, file_id: str) -> None:
        (self.folder / file_id).unlink(missing_ok=True)
