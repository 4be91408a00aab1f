"""What the gateway workers of one server share: the counts behind its limits, and calibration data.

Counts, so that the server's limits hold for the server, not per worker.

With N gateway workers the kernel hands each connection to any of them; a limit counted per process would
let N times as much through, and a limit split N ways would refuse a request at one worker while another
sits idle. So the counts are shared: one small table in shared memory, one row per worker. A worker writes
only its own row and checks the sum of all; a check and its add happen under one lock (`flock`, ~1 µs), so
two workers never pass a limit together. A worker zeroes its row when it starts: one that crashed holding
counts frees them when BentoML restarts it under the same worker index.

Calibration: int8 codes must not depend on which worker answers, so every worker takes the calibration
vectors the first one wrote (`agreed`).

Outside BentoML's arbiter (tests, `--development`) nothing is shared: there is one process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Sequence

import numpy as np
from bentoml._internal.context import server_context

from server_state.server_files import server_file
from server_state.shared_table import SLOTS, SharedTable


class SharedCounters:
    """Named integer counters, summed over the server's gateway workers. `open` them when the worker starts
    (else on first use): opening zeroes this worker's row."""

    def __init__(self, names: Sequence[str], file_name: str = "counters") -> None:
        self.names = {name: column for column, name in enumerate(names)}
        self._table = SharedTable(file_name, SLOTS, len(self.names))
        self._opened = False
        self._slot = 0

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Checks and adds inside this block see no other worker's adds in between."""
        self.open()
        with self._table.locked():
            yield

    def total(self, name: str) -> int:
        """The server's count: every worker's, this one's included."""
        return int(self.open()[:, self.names[name]].sum())

    def add(self, name: str, amount: int) -> None:
        """Add to this worker's count; call inside `locked` when a check depends on it."""
        self.open()[self._slot, self.names[name]] += amount

    def open(self) -> np.ndarray:
        table = self._table.open()
        if not self._opened:
            self._opened = True
            self._slot = (server_context.worker_index or 0) % SLOTS
            with self._table.locked():
                table[self._slot] = 0  # an earlier process of this worker index may have died holding counts
        return table


def agreed(name: str, array: np.ndarray) -> np.ndarray:
    """The first `array` any worker of this server offered under `name`: this one, or an earlier one's."""
    path = server_file(f"{hashlib.sha256(name.encode()).hexdigest()[:16]}.npy")
    if path is None:
        return array
    draft = path.with_name(f"{path.name}.{os.getpid()}")
    with open(draft, "wb") as file:
        np.save(file, array)
    try:
        os.link(draft, path)  # atomic, and fails if another worker's is there: the first one wins
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return np.load(path)
