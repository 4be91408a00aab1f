"""Cutting a model service's batch into forward passes, and keeping one bad input from failing its neighbours."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

logger = logging.getLogger(__name__)
Item = TypeVar("Item")
Result = TypeVar("Result")


# What one forward pass costs beyond its padded tokens, in tokens. On CPU a pass of all-MiniLM-L6-v2 took
# 3.7 ms + 0.11 ms per padded token (fitted over 1-32 rows of 8-256 tokens): ~32 tokens. On a GPU the
# per-token cost is tiny until the device is full, so a pass is worth thousands of tokens.
PASS_OVERHEAD_TOKENS = {"cpu": 32, "gpu": 4096}


def pass_overhead_tokens(device: str) -> int:
    return PASS_OVERHEAD_TOKENS["cpu" if device == "cpu" else "gpu"]


@dataclass(frozen=True)
class BatchLimits:
    """Inputs and padded tokens per forward pass."""

    batch_size: int
    max_batch_tokens: int

    def fits(self, lengths: Sequence[int]) -> bool:
        """Whether inputs of these lengths make one pass: at most `batch_size` of them, and at most
        `max_batch_tokens` padded tokens (longest x count); one input, however long, runs alone."""
        count = len(lengths)
        return count <= self.batch_size and (count <= 1 or max(lengths) * count <= self.max_batch_tokens)


# On CPU a pass's cost grows with its tokens from the first one, and passes past a few dozen rows gain
# nothing (models/inference/lanes.py splits big batches across cores instead).
CPU_LIMITS = BatchLimits(32, 16384)
# On a GPU a pass costs about the same until the device is full: all-MiniLM-L6-v2 fills an H100 at a few
# hundred short rows, bge-large at ~8k tokens. The bounds keep one pass's latency in tens of milliseconds.
GPU_MAX_LIMITS = BatchLimits(512, 65536)
GPU_MIN_BATCH_TOKENS = 4096
ACTIVATION_SHARE = 0.25  # of the device memory free after loading, for one model's passes
ATTENTION_SPAN = 512  # positions whose attention scores a token holds at once (kernels without flash)
TOKENS_PER_ROW = 64  # what a pass's row count allows for: short sentences to paragraphs


# How long a call to a model service may take while live queries wait (gateway/queue/coalesce.py): what a query
# waits for at most, beside the call of its own, where it cannot run beside the batch (a GPU, CTranslate2). On this
# 2-core CPU MiniLM runs passes of 200-1,000 tokens at the same tokens/s and longer ones slower
# (bench/live_beside_indexing.py --pass-sizes); on a GPU a pass of a few milliseconds holds thousands of tokens.
DEFAULT_PASS_BUDGET_MS = {"cpu": 30.0, "gpu": 10.0}


def pass_budget_ms(configured: float | None, device: str) -> float:
    """The configured pass time budget, or the device's default."""
    return configured or DEFAULT_PASS_BUDGET_MS["cpu" if device == "cpu" else "gpu"]


@dataclass(frozen=True)
class PassCost:
    """What a call of rows costs a model service, in seconds: `call_s` whatever it holds, plus `token_s` per padded
    token (its longest row's length x its rows), as measured at warm-up (`fitted`)."""

    call_s: float
    token_s: float

    def seconds(self, lengths: Sequence[int]) -> float:
        return self.call_s + self.work_seconds(lengths)

    def work_seconds(self, lengths: Sequence[int]) -> float:
        """What the rows add to a call's fixed cost: what a pass time budget bounds (any call, a query's own too,
        pays the fixed cost)."""
        return self.token_s * max(lengths, default=0) * len(lengths)

    @classmethod
    def fitted(cls, small: tuple[int, float], large: tuple[int, float]) -> PassCost | None:
        """The line through two calls' (padded tokens, seconds); None when they do not make one (the larger
        call no slower: a machine too noisy to tell)."""
        (small_tokens, small_s), (large_tokens, large_s) = small, large
        if large_tokens <= small_tokens or large_s <= small_s:
            return None
        token_s = (large_s - small_s) / (large_tokens - small_tokens)
        return cls(max(0.0, small_s - token_s * small_tokens), token_s)


def default_batch_size(on_gpu: bool) -> int:
    """The largest pass size a model gets when none is configured."""
    return GPU_MAX_LIMITS.batch_size if on_gpu else CPU_LIMITS.batch_size


def activation_bytes_per_token(folder: Path, dtype_bytes: int) -> int:
    """What one padded token costs in device memory during a pass: a layer's activations (~12 hidden-size
    vectors: query, key, value, output and the 4x feed-forward) and its attention scores, from the
    checkpoint's `config.json` (its text tower's, for multimodal ones)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    text = config.get("text_config") or config
    hidden = int(text.get("hidden_size") or text.get("d_model") or 1024)
    heads = int(text.get("num_attention_heads") or 16)
    return dtype_bytes * (12 * hidden + heads * ATTENTION_SPAN)


def batch_limits(
    batch_size: int | None,
    max_batch_tokens: int | None,
    device: str,
    free_bytes: int | None = None,
    bytes_per_token: int | None = None,
) -> BatchLimits:
    """The configured limits, or the device's: on CPU `CPU_LIMITS`; on a GPU, the tokens whose activations
    fit `ACTIVATION_SHARE` of its free memory, within `GPU_MIN_BATCH_TOKENS` and `GPU_MAX_LIMITS`, and rows
    for passes of `TOKENS_PER_ROW`-token inputs."""
    if device == "cpu" or not free_bytes or not bytes_per_token:
        default = CPU_LIMITS
    else:
        fits = int(free_bytes * ACTIVATION_SHARE) // bytes_per_token
        tokens = max(GPU_MIN_BATCH_TOKENS, min(GPU_MAX_LIMITS.max_batch_tokens, fits))
        rows = max(CPU_LIMITS.batch_size, min(GPU_MAX_LIMITS.batch_size, tokens // TOKENS_PER_ROW))
        default = BatchLimits(rows, tokens)
    return BatchLimits(batch_size or default.batch_size, max_batch_tokens or default.max_batch_tokens)


def plan_batches(
    lengths: Sequence[int], batch_size: int, max_batch_tokens: int, overhead_tokens: int = PASS_OVERHEAD_TOKENS["cpu"]
) -> list[list[int]]:
    """Indices sorted by length, cut into passes of at most `batch_size` inputs and `max_batch_tokens` padded
    tokens (longest length x count), at the cuts that cost least: `overhead_tokens` per pass plus every
    padded token. An input longer than the whole budget still runs, alone.

    Padding is what a fixed cut wastes: 40 queued sentences cut 32 + 8 pad the 32 to the longest of them;
    cut where the lengths jump, each pass pads little. Dynamic programming over the sorted lengths, O(n x
    batch_size), each step one numpy operation: 2,048 rows in GPU-sized passes (512 rows) take ~10 ms here, which
    the gateway can afford for a request that does not fit one pass (`gateway/queue/`)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    ordered = np.array([lengths[i] for i in order], dtype=np.int64)
    best = np.full(len(ordered) + 1, np.inf)  # best[j]: the cheapest plan of the j shortest
    best[0] = 0.0
    cut = [0] * (len(ordered) + 1)  # where best[j]'s last pass starts
    counts = np.arange(batch_size, 0, -1)  # the last pass's rows, for each start in a window ending at `end`
    for end in range(1, len(ordered) + 1):
        longest = int(ordered[end - 1])
        most = batch_size if longest <= 0 else min(batch_size, max(1, max_batch_tokens // longest))
        first = max(0, end - most)
        costs = best[first:end] + (overhead_tokens + longest * counts[batch_size - (end - first) :])
        latest = len(costs) - 1 - int(np.argmin(costs[::-1]))  # among equal costs, the shortest last pass
        best[end], cut[end] = costs[latest], first + latest
    passes: list[list[int]] = []
    end = len(ordered)
    while end:
        passes.append(order[cut[end] : end])
        end = cut[end]
    return passes[::-1]


def run_isolated(run: Callable[[list[Item]], Sequence[Result]], items: list[Item]) -> list[Result | Exception]:
    """Run `items` together; if that fails, bisect so only the inputs that fail on their own fail."""
    try:
        return list(run(items))
    except Exception as exc:
        # The exception's type only: its message may quote the input. Its traceback at debug level, where the
        # server's log-record factory withholds the messages (bento/serving/server_logging.py).
        traced = logger.isEnabledFor(logging.DEBUG)
        if len(items) == 1:
            logger.warning("input failed on its own: %s", type(exc).__name__, exc_info=traced)
            return [exc]
        logger.warning("a pass of %d inputs failed (%s); retrying in halves", len(items), type(exc).__name__)
    half = len(items) // 2
    return run_isolated(run, items[:half]) + run_isolated(run, items[half:])
