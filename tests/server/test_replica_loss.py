"""A rolling update under load fails no request: the split topology (two gateways and two TextEmbedder model
services, each behind HAProxy health-checked on /readyz, as a Kubernetes Service follows readiness;
testkit/replicas.py) takes 32 OpenAI SDK clients while one gateway and one model service leave their backends
and get SIGTERM, as a rolling update stops a pod (Kubernetes takes a terminating pod out of its Service's
endpoints; the manifests' preStop sleep covers the time that takes). bench/replica_loss.py measures SIGKILL
too, and the replacements."""

from __future__ import annotations

import signal

import pytest

from testkit.replicas import Load, split_topology
from testkit.sentences import make_sentences
from tests.conftest import MINILM

CLIENTS = 32
pytestmark = pytest.mark.server


def test_a_rolling_update_fails_no_request(tmp_path):
    with split_topology(tmp_path, MINILM) as topology:
        load = Load(topology.url, MINILM, CLIENTS, make_sentences(64))
        load.start()
        try:
            load.wait_answered(2 * CLIENTS)  # every client under way
            load.next_phase("SIGTERM")
            stopped = [topology.gateways[1], topology.model_services[1]]
            for server in stopped:
                topology.leave(server)  # as a terminating pod leaves its Service's endpoints
                server.signal(signal.SIGTERM)
            for server in stopped:
                server.wait_stopped()  # each finished what it had, then exited
            load.wait_answered(4 * CLIENTS)  # and the survivors carry every client on
        finally:
            load.stop()
    rolled = load.phases[-1]
    assert rolled.failed == 0, sorted(set(rolled.errors))[:5]
    # Nor did any request need the SDK's retries: each stopping server finished what it had.
    assert (rolled.retries, rolled.refusals) == (0, [])
    assert rolled.answered >= 4 * CLIENTS
