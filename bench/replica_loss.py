"""Replicas lost under load: what clients see when a gateway or a model-service replica dies or is rolled.

    python bench/replica_loss.py [--clients 32] [--settle 20]

The split topology as on Kubernetes, on loopback (`testkit/replicas.py`): two TextEmbedder model services
(all-MiniLM-L6-v2) behind one HAProxy backend, two gateways (`--depends TextEmbedder=<that backend>`) behind
another, each backend health-checked on /readyz, as a Service's endpoints follow readiness. HAProxy is
Debian's (installed when missing).
`--clients` OpenAI SDK clients (default retries: 2, on connection errors, 429 and 5xx) send one sentence each,
back to back, through the gateways' HAProxy. Then, `--settle` seconds apart, as an orchestrator would:

1. SIGKILL one gateway replica (every process of it), and start it again;
2. SIGKILL one model-service replica, and start it again;
3. a rolling update: one gateway and one model service taken out of their backends (as Kubernetes removes a
   terminating pod from its Service's endpoints), then SIGTERM, and started again.

Printed per phase: requests sent, answered, failed as the SDK raised them, attempts past the first (the SDK's
retries: after a dropped connection or an error answer), answers that were not a 200, and latency p50 / p99.
The replacements start while the load runs, as a Deployment's would.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import corpus as short_sentences  # noqa: E402
from testkit.replicas import Load, split_topology  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def p(values: list[float], q: int) -> float:
    return 1000 * statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else float("nan")


def run(clients: int, settle: float, folder: Path) -> Load:
    with split_topology(folder, MINILM) as topology:
        models, gateways = topology.model_services, topology.gateways
        load = Load(topology.url, MINILM, clients, short_sentences(256, 8, 20))
        load.start()
        time.sleep(settle)  # the steady phase's length
        for label, victims, sig in (
            ("gateway SIGKILL", [gateways[0]], signal.SIGKILL),
            ("model service SIGKILL", [models[0]], signal.SIGKILL),
            ("gateway + model service SIGTERM", [gateways[1], models[1]], signal.SIGTERM),
        ):
            load.next_phase(label)
            for victim in victims:
                if sig == signal.SIGTERM:  # a rolling update: out of the Service's endpoints, then SIGTERM
                    topology.leave(victim)
                victim.signal(sig)
            for victim in victims:
                victim.wait_stopped()
                victim.start()  # the replacement, as its Deployment starts one
                topology.rejoin(victim)
            for victim in victims:
                victim.wait_ready()
            time.sleep(settle)  # the phase goes on past the replacement's start
        load.stop()
        return load


def report(load: Load, clients: int) -> None:
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {clients} OpenAI SDK clients")
    print("phase | sent | answered | failed (as the SDK raised) | SDK retries | answers not 200 | p50 ms | p99 ms")
    for phase in load.phases:
        counts = f"{phase.sent} | {phase.answered} | {phase.failed} | {phase.retries} | {len(phase.refusals)}"
        print(f"{phase.name} | {counts} | {p(phase.latencies, 50):.0f} | {p(phase.latencies, 99):.0f}")
    for phase in load.phases:
        for error in sorted({*phase.errors, *phase.refusals})[:3]:
            print(f"  {phase.name}: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds of load before and after each event")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="replica-loss-") as scratch:
        load = run(args.clients, args.settle, Path(scratch))
    report(load, args.clients)


if __name__ == "__main__":
    main()
