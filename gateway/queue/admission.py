"""Admission control: each model service takes a bounded amount of waiting work, so that overload is an
immediate 429 the client can retry, not a queue that grows until every request times out. The bounds hold
for the whole server, whatever the number of gateway workers (`SharedCounters`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from config import errors
from gateway.metrics import QUEUED_ITEMS, QUEUED_TOKENS, REJECTED
from gateway.shared_memory import SharedCounters


def admission_counters(model_service: str) -> list[str]:
    """The shared counters one model service's admission keeps."""
    return [f"{model_service}.items", f"{model_service}.tokens"]


class Admission:
    """The work waiting on one model service, in inputs and tokens, bounded by the configuration."""

    def __init__(
        self, model_service: str, max_items: int, max_tokens: int, counters: SharedCounters | None = None
    ) -> None:
        self.model_service = model_service
        self.max_items, self.max_tokens = max_items, max_tokens
        self._items, self._tokens = admission_counters(model_service)
        self.counters = counters or SharedCounters([self._items, self._tokens])

    @property
    def items(self) -> int:
        return self.counters.total(self._items)

    @property
    def tokens(self) -> int:
        return self.counters.total(self._tokens)

    @contextlib.contextmanager
    def admit(self, items: int, tokens: int) -> Iterator[None]:
        """Hold `items` and `tokens` of the queue while the block runs, or raise Overloaded at once.

        An idle service takes any request, so one larger than the bounds is slow, never refused forever.
        """
        with self.counters.locked():
            queued_items, queued_tokens = self.items, self.tokens
            if queued_items and (queued_items + items > self.max_items or queued_tokens + tokens > self.max_tokens):
                REJECTED.labels(model_service=self.model_service, reason="queue_full").inc()
                raise errors.Overloaded(
                    f"the {self.model_service} queue is full ({queued_items} inputs, {queued_tokens} tokens "
                    "waiting); retry shortly"
                )
            self._add(items, tokens)
        try:
            yield
        finally:
            with self.counters.locked():
                self._add(-items, -tokens)

    def _add(self, items: int, tokens: int) -> None:
        self.counters.add(self._items, items)
        self.counters.add(self._tokens, tokens)
        QUEUED_ITEMS.labels(model_service=self.model_service).set(self.items)
        QUEUED_TOKENS.labels(model_service=self.model_service).set(self.tokens)
