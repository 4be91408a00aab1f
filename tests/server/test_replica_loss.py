"""A rolling update under load fails no request: the split topology (two gateways and two TextEmbedder model
services, each behind HAProxy health-checked on /readyz, as a Kubernetes Service follows readiness;
testkit/replicas.py) takes 32 OpenAI SDK clients while one gateway and one model service leave their backends
and get SIGTERM, as a rolling update stops a pod (Kubernetes takes a terminating pod out of its Service's
endpoints; the manifests' preStop sleep covers the time that takes). The gateways share a real Redis (tenants'
limits) and PostgreSQL (bulk jobs), as on Kubernetes (testkit/shared_state.py): a bulk job, at work on both
gateways before the load starts (2,000 lines, still running at the update on this machine; its lines yield to
the load), completes with every line once; a limited tenant spending its key through it all is let through
what one shared bucket allows. And a model-service replica that stops answering (SIGSTOP: a hung process, a
lost node) is routed around: the gateways send its overdue calls again (gateway/queue/resend.py), no request
fails or is left waiting, and their metrics count the calls sent again. SIGKILL and the replacements were measured
once (docs/operations.md, "Replicas lost under load")."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from openai import OpenAI

from testkit.batches import embedding_lines, finished, output_lines, submitted
from testkit.replicas import Load, Replica, split_topology
from testkit.sentences import make_sentences
from testkit.shared_state import LimitedSender, shared_state
from tests.conftest import MINILM, metric

CLIENTS = 32
RATE = 6  # the limited tenant's requests a minute (and burst): spent within the test's first seconds
BATCH_LINES = 2000
START_TIMEOUT_S = 120
RESEND_S = "2"  # a call with no answer 2 s past its expected time is sent again (10 s by default)
pytestmark = pytest.mark.server


def batch_lines_done(gateway: Replica, key: str) -> float:
    """The bulk-job lines one gateway (its own port, not the balancer's) has run."""
    metrics = httpx.get(f"http://127.0.0.1:{gateway.port}/metrics", headers={"Authorization": f"Bearer {key}"})
    metrics.raise_for_status()
    return metric(metrics.text, "embento_batch_lines_total")


def test_a_rolling_update_fails_no_request_loses_no_batch_line_and_keeps_the_limits(tmp_path):
    with (
        shared_state(tmp_path / "shared", RATE) as shared,
        split_topology(tmp_path, MINILM, gateway_env=shared.gateway_env) as topology,
    ):
        jobs = OpenAI(base_url=f"{topology.url}/v1", api_key=shared.load_key, timeout=60)
        lines = embedding_lines(BATCH_LINES)
        batch = submitted(jobs, lines)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (
            min(batch_lines_done(gateway, shared.load_key) for gateway in topology.gateways) == 0
        ):  # both at work on it
            assert time.monotonic() < deadline, "the bulk job never reached both gateways"
            time.sleep(0.1)
        load = Load(topology.url, MINILM, CLIENTS, make_sentences(64), api_key=shared.load_key)
        limited = LimitedSender(topology.url, MINILM, shared.limited_key)
        load.start()
        limited.start()
        try:
            load.wait_answered(2 * CLIENTS)  # every client under way
            limited.wait_refused(1)  # its burst spent through both gateways
            load.next_phase("SIGTERM")
            stopped = [topology.gateways[1], topology.model_services[1]]
            for server in stopped:
                topology.leave(server)  # as a terminating pod leaves its Service's endpoints
                server.signal(signal.SIGTERM)
            for server in stopped:
                server.wait_stopped()  # each finished what it had, then exited
            load.wait_answered(4 * CLIENTS)  # and the survivors carry every client on
            limited.wait_refused(limited.refused + 5)  # the survivor refuses the tenant too
        finally:
            limited.stop()
            load.stop()
        batch = finished(jobs, batch.id, timeout_s=300)
        custom_ids = [line["custom_id"] for line in output_lines(jobs, batch.output_file_id)]
        stored = int(shared.postgres.sql("select count(*) from embento_batch_results"))
    rolled = load.phases[-1]
    assert rolled.failed == 0, sorted(set(rolled.errors))[:5]
    # Nor did any request need the SDK's retries: each stopping server finished what it had.
    assert (rolled.retries, rolled.refusals) == (0, [])
    assert rolled.answered >= 4 * CLIENTS
    assert batch.status == "completed" and custom_ids == [line["custom_id"] for line in lines]
    assert stored == BATCH_LINES  # each line's result stored once, whichever gateway ran it
    assert limited.others == []
    # One bucket for both gateways, then for the survivor: two would have let through twice the burst. (One
    # more for a refill that came due as the run's time was read.)
    assert RATE <= limited.admitted <= limited.allowed(RATE) + 1, (limited.admitted, limited.allowed(RATE))


def test_a_model_service_that_stops_answering_is_routed_around(tmp_path):
    with split_topology(tmp_path, MINILM, gateway_env={"EMBENTO_MODEL_CALL_RESEND_S": RESEND_S}) as topology:
        load = Load(topology.url, MINILM, CLIENTS, make_sentences(64))
        silent = topology.model_services[1]
        load.start()
        try:
            load.wait_answered(2 * CLIENTS)
            load.next_phase("SIGSTOP")
            silent.signal(signal.SIGSTOP)  # its connections stay open; nothing it was sent is answered
            load.wait_answered(8 * CLIENTS)  # the other replica carries every client on
            load.stop()  # and every request answered: none left waiting on the silent one
        finally:
            silent.signal(signal.SIGCONT)
        resends = sum(
            metric(httpx.get(f"http://127.0.0.1:{gateway.port}/metrics").text, "embento_model_call_resends_total")
            for gateway in topology.gateways
        )
    silenced = load.phases[-1]
    assert (silenced.failed, silenced.refusals) == (0, []), sorted(set(silenced.errors))[:5]
    assert silenced.answered >= 8 * CLIENTS
    assert resends > 0  # the calls the silent replica held, sent again
