"""Running one batch on several CPU cores at once: one pass per core, each on a single intra-op thread.

A small transformer pass spread over two intra-op threads spends much of its time at OpenMP barriers, and
stalls whenever another process (the gateway, the load generator) takes one of its cores. Two passes of
half the rows, one thread each, do the same work without waiting on each other. all-MiniLM-L6-v2 on this
machine's 2 cores, in-process: 32 rows 313-324 -> 339-341 rows/s, 80 rows 295-324 -> 343-354. Through the
server at 32 in flight x 1 sentence: 184-200 -> 216-217 sent/s; with ONNX Runtime 146-149 -> 242-245.

Small batches stay whole, on the caller's thread with all its intra-op threads: each op of a pass of a few
rows is bound by Python dispatch under the GIL, so two such passes slow each other down (2 rows: 141 -> 109
rows/s, 12 rows: even, 16 rows: 301 -> 316).

ONNX Runtime follows the same rule. Its passes run concurrently on one session, which has the service's
threads for a batch run whole and workers that do not spin (models/inference/onnx_runtime.session_options), so a lane
runs on its own calling thread. Measured on 2 cores (853238e:bench/onnx_cpu.py), 1 lane x 2 threads against 2 lanes
x 1 thread, neither spinning: 8 rows 47 -> 58 ms, 16 rows 160 -> 120 ms, 32 rows 327 -> 276 ms, 64 rows
632 -> 455 ms. On N cores a model service gets its share of them (`cpu_threads`), and as many lanes as
threads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

from models.base import ModelInfo

# Tokens a lane needs for its pass to beat sharing the cores inside one pass (6-8 sentences of ~14 tokens).
LANE_MIN_TOKENS = 96


def shares_cores(info: ModelInfo) -> bool:
    """Whether concurrent passes of this model each use their own core. torch passes run on the calling
    thread's OpenMP team; an ONNX Runtime session runs concurrent calls in parallel. CTranslate2 queues calls
    on its own workers, and a GPU runs one kernel stream: neither gains."""
    return info.device == "cpu" and info.backend in ("torch", "onnx")


def share_out(lengths: Sequence[int], lanes: int, min_tokens: int = LANE_MIN_TOKENS) -> list[list[int]]:
    """Indices cut into at most `lanes` runs of neighbouring lengths with about equal tokens each, so every
    lane pads little and they finish together; fewer parts when a part would hold under `min_tokens`."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    total = sum(lengths)
    parts = max(1, min(lanes, len(order), total // max(1, min_tokens)))
    share, done = total / parts, 0
    cut: list[list[int]] = [[] for _ in range(parts)]
    for index in order:
        cut[min(int(done / share), parts - 1)].append(index)
        done += lengths[index]
    return [part for part in cut if part]


class Lanes:
    """`count` threads with one intra-op thread each, running the parts of one batch at the same time."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._threads: list[ThreadPoolExecutor] = []
        if count > 1:
            from models.inference.host import set_cpu_threads  # torch's too, where it is loaded

            for n in range(count):
                lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lane{n}")
                lane.submit(set_cpu_threads, 1).result()  # OpenMP keeps the count per thread
                self._threads.append(lane)

    def run(self, work: Callable[[list[int]], None], lengths: Sequence[int]) -> None:
        """`work` over every index of `lengths`: split across the lanes when each part is worth a pass of its
        own, else whole on the caller's thread. Returns when every part is done; re-raises a part's error."""
        if not lengths:
            return
        parts = share_out(lengths, self.count) if self._threads else [list(range(len(lengths)))]
        if len(parts) == 1:
            work(parts[0])
            return
        futures = [lane.submit(work, part) for lane, part in zip(self._threads, parts)]
        wait(futures)  # every part finished before anything returns or raises: none still writes afterwards
        for future in futures:
            future.result()
