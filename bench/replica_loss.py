"""Replicas lost under load: what clients see when a gateway or a model-service replica dies or is rolled. The
setup, the four events and the figures are docs/operations.md's "Replicas lost under load".

    python bench/replica_loss.py [--clients 32] [--settle 20] [--rate 60] [--batch-lines 4000]

The split topology on loopback (testkit/replicas.py: two TextEmbedders and two gateways, each pair behind an
HAProxy backend health-checked on /readyz; HAProxy is Debian's, installed when missing), the gateways sharing a
Redis and a PostgreSQL (testkit/shared_state.py). `--clients` OpenAI SDK clients send one sentence each, back to
back, a bulk job of `--batch-lines` lines runs throughout, and a tenant limited to `--rate` requests a minute spends
its key; then, `--settle` seconds apart: a gateway SIGKILLed, a model service SIGKILLed, a model service SIGSTOPped
(killed `--settle` s later, as its liveness probe has the kubelet do), and a rolling update (out of the backends,
then SIGTERM), each replacement started while the load runs. Printed per phase: requests sent, answered, failed
as the SDK raised them, its retries, answers not 200, p50 / p99; then the job's status and whether its output
holds every line once, and the limited tenant's requests let through against one shared bucket.
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
from dataclasses import dataclass
from pathlib import Path

from openai import OpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import corpus as short_sentences  # noqa: E402
from testkit.batches import embedding_lines, finished, output_lines, submitted  # noqa: E402
from testkit.replicas import Load, split_topology  # noqa: E402
from testkit.shared_state import LimitedSender, shared_state  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def p(values: list[float], q: int) -> float:
    return 1000 * statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else float("nan")


@dataclass
class Outcome:
    load: Load
    limited: LimitedSender
    batch_lines: int
    batch_status: str
    batch_once: bool  # the output's custom_ids are the input's, each once, in order
    results_stored: int


def run(clients: int, settle: float, rate: int, lines_count: int, folder: Path) -> Outcome:
    with (
        shared_state(folder / "shared", rate) as shared,
        split_topology(folder, MINILM, gateway_env=shared.gateway_env) as topology,
    ):
        models, gateways = topology.model_services, topology.gateways
        jobs = OpenAI(base_url=f"{topology.url}/v1", api_key=shared.load_key, timeout=60)
        lines = embedding_lines(lines_count)
        batch = submitted(jobs, lines)
        load = Load(topology.url, MINILM, clients, short_sentences(256, 8, 20), api_key=shared.load_key)
        limited = LimitedSender(topology.url, MINILM, shared.limited_key)
        load.start()
        limited.start()
        time.sleep(settle)  # the steady phase's length
        for label, victims, sig in (
            ("gateway SIGKILL", [gateways[0]], signal.SIGKILL),
            ("model service SIGKILL", [models[0]], signal.SIGKILL),
            ("model service SIGSTOP", [models[1]], signal.SIGSTOP),
            ("gateway + model service SIGTERM", [gateways[1], models[1]], signal.SIGTERM),
        ):
            load.next_phase(label)
            for victim in victims:
                if sig == signal.SIGTERM:  # a rolling update: out of the Service's endpoints, then SIGTERM
                    topology.leave(victim)
                victim.signal(sig)
            if sig == signal.SIGSTOP:  # silent until its liveness probe fails and it is killed
                time.sleep(settle)
                for victim in victims:
                    victim.signal(signal.SIGKILL)
            for victim in victims:
                victim.wait_stopped()
                victim.start()  # the replacement, as its Deployment starts one
                topology.rejoin(victim)
            for victim in victims:
                victim.wait_ready()
            time.sleep(settle)  # the phase goes on past the replacement's start
        limited.stop()
        load.stop()
        batch = finished(jobs, batch.id, timeout_s=300)
        custom_ids = [line["custom_id"] for line in output_lines(jobs, batch.output_file_id)]
        stored = int(shared.postgres.sql("select count(*) from embento_batch_results"))
        once = custom_ids == [line["custom_id"] for line in lines]
        return Outcome(load, limited, lines_count, batch.status, once, stored)


def report(outcome: Outcome, clients: int, rate: int) -> None:
    load, limited = outcome.load, outcome.limited
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {clients} OpenAI SDK clients")
    print("phase | sent | answered | failed (as the SDK raised) | SDK retries | answers not 200 | p50 ms | p99 ms")
    for phase in load.phases:
        counts = f"{phase.sent} | {phase.answered} | {phase.failed} | {phase.retries} | {len(phase.refusals)}"
        print(f"{phase.name} | {counts} | {p(phase.latencies, 50):.0f} | {p(phase.latencies, 99):.0f}")
    for phase in load.phases:
        for error in sorted({*phase.errors, *phase.refusals})[:3]:
            print(f"  {phase.name}: {error}")
    print(
        f"bulk job: {outcome.batch_lines} lines, {outcome.batch_status}; output every line once: "
        f"{'yes' if outcome.batch_once else 'NO'}; results stored: {outcome.results_stored}"
    )
    print(
        f"limited tenant ({rate}/min): {limited.admitted} let through, {limited.refused} refused (429) in "
        f"{limited.elapsed_s:.0f} s; one shared bucket allows {limited.allowed(rate):.0f}; "
        f"other answers: {len(limited.others)} {sorted(set(limited.others))[:3]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds of load before and after each event")
    parser.add_argument("--rate", type=int, default=60, help="the limited tenant's requests a minute")
    parser.add_argument("--batch-lines", type=int, default=4000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="replica-loss-") as scratch:
        outcome = run(args.clients, args.settle, args.rate, args.batch_lines, Path(scratch))
    report(outcome, args.clients, args.rate)


if __name__ == "__main__":
    main()
