"""Which gateway workers serve each model: what an admin change waits for before it answers."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from gateway.shared_memory import SharedCounters
from server_state.model_set import WARM_FILE


class WarmFlags:
    """Per gateway worker and model, 1 while the model is warm in that worker's registry (a table every worker of
    the server maps): the admin API answers once every worker has met its change."""

    def __init__(self, columns: Sequence[str], workers: Callable[[], int], column: Callable[[str], str]) -> None:
        """`workers`: how many gateway workers the server runs (asked once one serves, as `Lifecycle` does);
        `column`: a model's column (`ModelSet.column`: an added model's is its slot)."""
        self._warm = SharedCounters(columns, WARM_FILE)
        self._workers = workers
        self._column = column
        self._published: set[str] = set()

    def open(self) -> None:
        """In the worker, as it starts: its row starts at zero."""
        self._warm.open()

    def publish(self, warm: Collection[str]) -> None:
        """This worker's warm models now, for the others to count."""
        now = {self._column(name) for name in warm}
        with self._warm.locked():
            for name in now ^ self._published:
                self._warm.add(name, 1 if name in now else -1)
        self._published = now

    def everywhere(self, name: str) -> bool:
        """Whether every gateway worker of the server serves the model."""
        return self._warm.total(self._column(name)) >= self._workers()

    def nowhere(self, name: str) -> bool:
        """Whether no gateway worker serves the model any more."""
        return self._warm.total(self._column(name)) == 0
