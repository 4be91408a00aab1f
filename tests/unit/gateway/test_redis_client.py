"""The breaker the Redis users share (gateway/redis_client.py): a rest after a failure, one probe or all callers after
it, a failure while resting that does not extend the rest, and one warning a minute."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from gateway.redis_client import WARN_EVERY_S, Breaker


def test_one_probe_after_the_rest_and_its_success_opens_to_all():
    clock = SimpleNamespace(now=0.0)
    breaker = Breaker(retry_after_s=1.0, clock=lambda: clock.now)
    assert breaker.may_try()
    breaker.failed("down")
    clock.now = 0.99
    assert not breaker.may_try()
    clock.now = 1.0
    assert breaker.may_try() and not breaker.may_try(), "one caller probes, the others keep going without"
    breaker.succeeded()
    assert breaker.may_try() and breaker.may_try()


def test_without_a_probe_every_caller_tries_after_the_rest_and_a_resting_failure_does_not_extend_it():
    clock = SimpleNamespace(now=0.0)
    breaker = Breaker(retry_after_s=1.0, clock=lambda: clock.now, one_probe=False)
    breaker.failed("down")
    clock.now = 0.5
    assert not breaker.may_try()
    breaker.failed("a caller that did not try")
    clock.now = 1.0
    assert breaker.may_try() and breaker.may_try()


def test_a_warning_at_most_once_a_minute(caplog):
    clock = SimpleNamespace(now=0.0)
    breaker = Breaker(retry_after_s=1.0, clock=lambda: clock.now)
    with caplog.at_level(logging.WARNING, logger="gateway.redis_client"):
        for step in range(3):
            clock.now = step * 2.0
            breaker.failed(f"failure {step}")
        clock.now = WARN_EVERY_S
        breaker.failed("a minute later")
    assert [r.getMessage().split(",")[0] for r in caplog.records] == ["failure 0", "a minute later"]
