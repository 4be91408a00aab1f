"""The warm-up policy on its own: a permanent failure is a load failure (stop, or with allow_partial report it
and serve the others); a transient one is retried, and logged at WARNING once it has lasted 30 s, once a
minute. The real path through a server is in tests/server/test_faults.py."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from config import errors
from gateway.served.warmup import Warmup
from models.base import ModelInfo


def info(name: str) -> ModelInfo:
    return ModelInfo(
        served_model_name=name,
        model_id=name,
        kind="embed",
        modalities=["text"],
        backend="torch",
        dimension=4,
        max_input_tokens=8,
        normalized=True,
        device="cpu",
        dtype="float32",
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Models:
    """Two models; `failures` says what each one's warm-up raises (a list, one entry per try)."""

    def __init__(self, failures: dict[str, list[BaseException]]) -> None:
        self.failures = failures
        self.stopped: list[str] = []

    async def fetch_infos(self) -> tuple[dict[str, ModelInfo], dict[str, str]]:
        return {"a": info("a"), "b": info("b")}, {"c": "no weights"}

    async def warm_up(self, model: ModelInfo) -> None:
        pending = self.failures.get(model.served_model_name) or []
        if pending:
            raise pending.pop(0)

    def warmup(self, allow_partial: bool, clock: Clock | None = None) -> Warmup:
        return Warmup(self.fetch_infos, self.warm_up, allow_partial, self.stopped.append, clock or Clock())


def attempt(warmup: Warmup) -> bool:
    return asyncio.run(warmup.attempt())


def test_every_model_warm():
    warmup = Models({}).warmup(allow_partial=False)
    assert attempt(warmup) and warmup.done
    assert list(warmup.served) == ["a", "b"] and warmup.failed == {"c": "no weights"}


@pytest.mark.parametrize(
    "failure",
    [
        errors.InvalidRequest("query is 128 tokens"),
        errors.InferenceError("it answered outputs of shape [(3,)]"),
        KeyError("a bug"),
    ],
)
def test_a_permanent_failure_stops_the_server(failure):
    models = Models({"b": [failure]})
    warmup = models.warmup(allow_partial=False)
    assert not attempt(warmup)
    assert warmup.stopped and not warmup.done
    assert len(models.stopped) == 1 and models.stopped[0].startswith("model 'b': its warm-up failed: ")
    assert not attempt(warmup)  # stopping: no further tries
    assert len(models.stopped) == 1


def test_with_allow_partial_a_permanent_failure_is_reported_and_the_others_serve(caplog):
    models = Models({"a": [errors.InvalidRequest("query is 128 tokens")]})
    warmup = models.warmup(allow_partial=True)
    with caplog.at_level(logging.WARNING):
        assert attempt(warmup)
    assert list(warmup.served) == ["b"] and not models.stopped
    assert warmup.failed == {"c": "no weights", "a": "its warm-up failed: query is 128 tokens"}
    assert any(
        r.levelno == logging.WARNING and "model 'a'" in r.getMessage() and "128 tokens" in r.getMessage()
        for r in caplog.records
    )


def test_transient_failures_are_retried_and_warned_about_after_30_s_once_a_minute(caplog):
    clock = Clock()
    starting = aiohttp.ClientConnectionError("connection refused")
    models = Models({"a": [starting] * 6})
    warmup = models.warmup(allow_partial=False, clock=clock)

    def warnings_at(seconds: float) -> int:
        clock.now = seconds
        caplog.clear()
        with caplog.at_level(logging.INFO):
            assert not attempt(warmup)
        return sum(r.levelno == logging.WARNING and "connection refused" in r.getMessage() for r in caplog.records)

    assert [warnings_at(t) for t in (0, 10, 31, 50, 92, 95)] == [0, 0, 1, 0, 1, 0]
    assert not models.stopped
    assert attempt(warmup) and list(warmup.served) == ["a", "b"]


def test_a_model_service_still_starting_is_transient():
    async def not_up() -> tuple[dict[str, ModelInfo], dict[str, str]]:
        raise errors.NotReady("no model service reported ['a']")

    stopped: list[str] = []
    warmup = Warmup(not_up, Models({}).warm_up, False, stopped.append, Clock())
    assert not attempt(warmup) and not warmup.stopped and not stopped
