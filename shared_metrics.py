"""Prometheus metrics that both the gateway and the model services count.

BentoML imports service.py, and with it both gateway/ and runners/, in every process of a server, and
prometheus_client refuses a second metric of one name in a process: a metric both sides count is defined
once, here, where each may import it without importing the other.
"""

from __future__ import annotations

import bentoml

DROPPED_INPUTS = bentoml.metrics.Counter(
    name="embento_dropped_inputs",
    documentation="Inputs of abandoned requests dropped instead of run",
    labelnames=["model"],
)
