"""Runner-side pieces that can be checked without starting a server."""

from __future__ import annotations

from bentoml._internal.marshal.dispatcher import Optimizer

from runners.framework import make_work_conserving


def test_dispatcher_never_holds_requests_for_an_idle_model():
    make_work_conserving()
    optimizer = Optimizer(max_latency=300.0)
    for n in range(1, 30):  # batches that sat queued 200 ms behind a running batch
        optimizer.log_outbound(n=n, wait=0.2, duration=0.01 + 0.003 * n)
    optimizer.trigger_refresh()
    assert optimizer.wait == 0
    assert abs(optimizer.o_a - 0.003) < 1e-6 and abs(optimizer.o_b - 0.01) < 1e-6  # the latency model is kept
