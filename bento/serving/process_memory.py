"""Each Embento process's resident memory, as a Prometheus gauge: BentoML's multiprocess metrics carry no
process_* series, and a model service's memory grows with its passes and models, not with requests."""

from __future__ import annotations

import threading
import time

import bentoml
import psutil

REPORT_EVERY_S = 5.0

PROCESS_MEMORY = bentoml.metrics.Gauge(
    name="embento_process_resident_memory_bytes",
    documentation="Resident memory of each live Embento process (gateway workers, model services), by service",
    labelnames=["service"],
    multiprocess_mode="liveall",
)


def report_process_memory(service: str) -> None:
    """Keep this process's resident memory in the gauge, from a daemon thread: a process's memory changes
    while it loads and frees, with no request to observe it on."""
    gauge = PROCESS_MEMORY.labels(service=service)
    process = psutil.Process()

    def report() -> None:
        while True:
            gauge.set(process.memory_info().rss)
            time.sleep(REPORT_EVERY_S)

    threading.Thread(target=report, name="embento-memory", daemon=True).start()
