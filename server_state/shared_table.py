"""A table of integers every process of one server maps: the gateway workers' shared counts
(gateway/shared_memory.py), which the model services read too (the models pinned by requests: model_set.py)."""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
from collections.abc import Iterator

import numpy as np

from server_state.server_files import server_file

SLOTS = 256  # rows: worker indices are small integers, 1-based


class SharedTable:
    """An int64 table in a file every worker of the server maps (anonymous memory outside a server), with one
    lock for read-modify-writes across workers. The first worker to open it finds it zeroed."""

    def __init__(self, file_name: str, rows: int, columns: int) -> None:
        self._file_name = file_name
        self._shape = (rows, columns)
        self._array: np.ndarray | None = None
        self._fd: int | None = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[np.ndarray]:
        """The table; reads and writes inside this block see no other worker's writes in between."""
        array = self.open()
        if self._fd is None:
            yield array
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield array
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def open(self) -> np.ndarray:
        if self._array is not None:
            return self._array
        size = self._shape[0] * self._shape[1] * 8
        path = server_file(self._file_name)
        if path is None:
            buffer = mmap.mmap(-1, size)
        else:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if os.fstat(self._fd).st_size < size:
                    os.ftruncate(self._fd, size)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            buffer = mmap.mmap(self._fd, size)
        self._array = np.ndarray(self._shape, dtype=np.int64, buffer=buffer)
        return self._array
