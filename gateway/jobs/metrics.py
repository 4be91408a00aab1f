"""The bulk jobs' Prometheus metrics: batches by status and lines answered (their rate is the jobs' throughput);
the work they have queued on the model services is `embento_queued_items_by_class` (gateway/metrics.py)."""

from __future__ import annotations

import bentoml

BATCHES = bentoml.metrics.Gauge(
    name="embento_batches",
    documentation="Batches by status, as the job store last counted them",
    labelnames=["status"],
    multiprocess_mode="livemostrecent",
)
LINES = bentoml.metrics.Counter(
    name="embento_batch_lines",
    documentation="Batch lines answered and stored, by endpoint and outcome "
    "(succeeded: the output file; failed: the error file)",
    labelnames=["endpoint", "outcome"],
)
