"""Cutting a runner's batch into forward passes, and keeping one bad input from failing its neighbours."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

logger = logging.getLogger(__name__)
Item = TypeVar("Item")
Result = TypeVar("Result")


# What one forward pass costs beyond its padded tokens, in tokens. On CPU a pass of all-MiniLM-L6-v2 took
# 3.7 ms + 0.11 ms per padded token (fitted over 1-32 rows of 8-256 tokens): ~32 tokens. On a GPU the
# per-token cost is tiny until the device is full, so a pass is worth thousands of tokens.
PASS_OVERHEAD_TOKENS = {"cpu": 32, "gpu": 4096}


def pass_overhead_tokens(device: str) -> int:
    return PASS_OVERHEAD_TOKENS["cpu" if device == "cpu" else "gpu"]


def plan_batches(
    lengths: Sequence[int], batch_size: int, max_batch_tokens: int, overhead_tokens: int = PASS_OVERHEAD_TOKENS["cpu"]
) -> list[list[int]]:
    """Indices sorted by length, cut into passes of at most `batch_size` inputs and `max_batch_tokens` padded
    tokens (longest length x count), at the cuts that cost least: `overhead_tokens` per pass plus every
    padded token. An input longer than the whole budget still runs, alone.

    Padding is what a fixed cut wastes: 40 queued sentences cut 32 + 8 pad the 32 to the longest of them;
    cut where the lengths jump, each pass pads little. Dynamic programming over the sorted lengths, O(n x
    batch_size)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    ordered = [lengths[i] for i in order]
    best = [0.0] + [float("inf")] * len(ordered)  # best[j]: the cheapest plan of the j shortest
    cut = [0] * (len(ordered) + 1)  # where best[j]'s last pass starts
    for end in range(1, len(ordered) + 1):
        longest = ordered[end - 1]
        for start in range(end - 1, max(0, end - batch_size) - 1, -1):
            count = end - start
            if count > 1 and longest * count > max_batch_tokens:
                break
            cost = best[start] + overhead_tokens + longest * count
            if cost < best[end]:
                best[end], cut[end] = cost, start
    passes: list[list[int]] = []
    end = len(ordered)
    while end:
        passes.append(order[cut[end] : end])
        end = cut[end]
    return passes[::-1]


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
