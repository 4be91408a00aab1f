"""Admission control: each model service takes a bounded amount of waiting work, so that overload is an
immediate 429 the client can retry, not a queue that grows until every request times out."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gateway.metrics import QUEUED_ITEMS, QUEUED_TOKENS, REJECTED
from models import errors


class Admission:
    """The work waiting on one model service, in inputs and tokens, bounded by the configuration."""

    def __init__(self, model_service: str, max_items: int, max_tokens: int) -> None:
        self.model_service = model_service
        self.max_items, self.max_tokens = max_items, max_tokens
        self.items = self.tokens = 0

    @contextlib.contextmanager
    def admit(self, items: int, tokens: int) -> Iterator[None]:
        """Hold `items` and `tokens` of the queue while the block runs, or raise Overloaded at once.

        An idle service takes any request, so one larger than the bounds is slow, never refused forever.
        """
        if self.items and (self.items + items > self.max_items or self.tokens + tokens > self.max_tokens):
            REJECTED.labels(model_service=self.model_service, reason="queue_full").inc()
            raise errors.Overloaded(
                f"the {self.model_service} queue is full ({self.items} inputs, {self.tokens} tokens waiting); "
                "retry shortly"
            )
        self._add(items, tokens)
        try:
            yield
        finally:
            self._add(-items, -tokens)

    def _add(self, items: int, tokens: int) -> None:
        self.items += items
        self.tokens += tokens
        QUEUED_ITEMS.labels(model_service=self.model_service).set(self.items)
        QUEUED_TOKENS.labels(model_service=self.model_service).set(self.tokens)
