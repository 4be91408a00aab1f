"""Cutting a runner's batch into forward passes, and keeping one bad input from failing its neighbours."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

logger = logging.getLogger(__name__)
Item = TypeVar("Item")
Result = TypeVar("Result")


def plan_batches(lengths: Sequence[int], batch_size: int, max_batch_tokens: int) -> list[list[int]]:
    """Indices sorted by length, cut so each pass holds at most `batch_size` inputs and at most
    `max_batch_tokens` padded tokens (longest length x count). An input longer than the whole
    budget still runs, alone."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    passes: list[list[int]] = []
    current: list[int] = []
    for index in order:
        padded = lengths[index] * (len(current) + 1)  # sorted ascending: this one is the longest
        if current and (len(current) == batch_size or padded > max_batch_tokens):
            passes.append(current)
            current = []
        current.append(index)
    if current:
        passes.append(current)
    return passes


def run_isolated(
    run: Callable[[list[Item]], Sequence[Result]], items: list[Item]
) -> list[Result | Exception]:
    """Run `items` together; if that fails, bisect so only the inputs that fail on their own fail."""
    try:
        return list(run(items))
    except Exception as exc:
        if len(items) == 1:
            logger.warning("input failed on its own: %r", exc)
            return [exc]
        logger.warning("a pass of %d inputs failed (%r); retrying in halves", len(items), exc)
    half = len(items) // 2
    return run_isolated(run, items[:half]) + run_isolated(run, items[half:])
