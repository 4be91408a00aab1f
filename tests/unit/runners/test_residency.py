"""A model-service worker's residency (runners/residency.py) with the real pool and loading path, on an injected
clock: an idle model is unloaded once its keep_alive has passed and not before; the budget evicts the least recently
used idle model; a load that only a busy model could make room for is refused with the figures, and the busy model
answers on. The wanted set and the status file are the real files, in a temporary folder."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from pathlib import Path

import pytest

from config.settings import EmbentoConfig, ModelConfig
from models.base import TokenizedText
from models.inference.auto_backend import load_model
from models.preprocessing.text_tokenizer import TextTokenizer
from runners.pool import ModelPool
from runners.residency import Budget, Held, Residency, room_for
from server_state.model_set import ModelStatus, Pins, SharedModelSet
from testkit.sentences import make_sentences

SENTENCES = make_sentences(3)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def config(path: Path, name: str, **settings: object) -> ModelConfig:
    return ModelConfig(model_id=str(path), served_model_name=name, device="cpu", backend="torch", **settings)


def rows(path: Path, name: str) -> list[TokenizedText]:
    return TokenizedText.rows(name, TextTokenizer(path, config(path, name)).encode_texts(SENTENCES))


def residency(tmp_path: Path, configs: list[ModelConfig], clock: Clock, budget: Budget) -> Residency:
    server = EmbentoConfig(models=configs)
    pool = ModelPool(load_model, [cfg for cfg in configs if cfg.load == "eager"])
    return Residency(
        pool, configs, SharedModelSet(tmp_path, "test-", server), Pins(server), "TextEmbedder-1", budget, clock
    )


def want(kept: Residency, name: str, by: str = "tenant 't'") -> None:
    def loaded(models) -> None:  # type: ignore[no-untyped-def]
        models.models[name].loaded = True
        models.models[name].asked_by = by

    kept.shared.change(loaded)


def statuses(kept: Residency) -> dict[str, ModelStatus]:
    return kept.shared.statuses()["TextEmbedder-1"]


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "runners.residency"]


def test_an_idle_model_is_unloaded_once_its_keep_alive_has_passed(tmp_path, minilm_path, caplog):
    caplog.set_level(logging.INFO, "runners.residency")
    clock = Clock()
    kept = residency(tmp_path, [config(minilm_path, "first", keep_alive="60s")], clock, Budget())
    kept.step()
    clock.now += 30
    assert all(out.shape == (384,) for out in asyncio.run(kept.pool.run(rows(minilm_path, "first"))))
    kept.step()  # the use is seen now: idle from here
    clock.now += 59.9
    kept.step()
    assert "first" in kept.pool.models and statuses(kept)["first"].state == "loaded"
    clock.now += 0.2
    kept.step()
    assert "first" not in kept.pool.models
    assert statuses(kept)["first"].state == "unloaded" and statuses(kept)["first"].reason == "idle"
    assert kept.shared.read().models["first"].loaded is False  # a request wants it again
    assert logged(caplog) == [
        "model 'first' evicted from TextEmbedder-1: idle for 60.1 s, past its keep_alive of 60 s (configured)"
    ]


def test_the_budget_evicts_the_least_recently_used_idle_model(tmp_path, minilm_path, tiny_bert_path, caplog):
    caplog.set_level(logging.INFO, "runners.residency")
    configs = [
        config(minilm_path, "first"),
        config(tiny_bert_path, "second", load="lazy"),
        config(tiny_bert_path, "third", load="lazy"),
    ]
    kept = residency(tmp_path, configs, Clock(), Budget(max_models=2))
    want(kept, "second")
    kept.step()
    assert set(kept.pool.models) == {"first", "second"}
    asyncio.run(kept.pool.run(rows(minilm_path, "first")))  # `second` is now the least recently used
    want(kept, "third")
    kept.step()
    assert set(kept.pool.models) == {"first", "third"}
    assert statuses(kept)["second"].reason == "budget" and statuses(kept)["third"].state == "loaded"
    assert statuses(kept)["third"].weight_bytes > 0 and statuses(kept)["third"].load_s is not None
    lines = logged(caplog)
    assert re.fullmatch(r"model 'second' loaded in \d+\.\d s in TextEmbedder-1, asked by tenant 't'", lines[0])
    assert lines[1] == (
        "model 'second' evicted from TextEmbedder-1 by the budget (max_loaded_models 2): room for 'third', "
        "asked by tenant 't'"
    )
    assert re.fullmatch(r"model 'third' loaded in \d+\.\d s in TextEmbedder-1, asked by tenant 't'", lines[2])
    assert len(lines) == 3

    def unload(models) -> None:  # type: ignore[no-untyped-def]
        models.models["third"].loaded = models.models["third"].on_request = False
        models.models["third"].asked_by = "admin"

    kept.shared.change(unload)
    kept.step()
    assert logged(caplog)[3:] == ["model 'third' unloaded from TextEmbedder-1, asked by admin"]


def test_a_load_that_only_a_busy_model_could_make_room_for_is_refused(tmp_path, minilm_path, tiny_bert_path):
    kept = residency(
        tmp_path, [config(minilm_path, "first"), config(tiny_bert_path, "second", load="lazy")], Clock(), Budget(1)
    )
    loop = asyncio.new_event_loop()
    release = threading.Event()
    # The pool's one torch thread is held, so `first`'s call stays in flight until released: no timing involved.
    kept.pool._torch_thread.submit(release.wait)
    call = loop.create_task(kept.pool.run(rows(minilm_path, "first")))
    loop.run_until_complete(asyncio.sleep(0))  # the call has started: `first` is busy
    assert kept.pool.busy("first") == 1
    want(kept, "second")
    kept.step()
    refused = statuses(kept)["second"]
    assert refused.state == "failed" and refused.refused
    assert "max_loaded_models 1" in refused.reason and "with calls in flight: ['first']" in refused.reason
    assert set(kept.pool.models) == {"first"} and kept.shared.read().models["second"].loaded is False
    release.set()
    assert all(out.shape == (384,) for out in loop.run_until_complete(call))
    loop.close()
    want(kept, "second")  # idle now: the same load evicts it
    kept.step()
    assert set(kept.pool.models) == {"second"} and statuses(kept)["first"].reason == "budget"


@pytest.mark.parametrize(
    ("budget", "held", "size", "evicted"),
    [
        (Budget(max_models=2), [Held("a", 10, 2, 0), Held("b", 10, 1, 0)], 10, ["b"]),
        (Budget(max_bytes=25), [Held("a", 10, 1, 0), Held("b", 10, 2, 0)], 10, ["a"]),
        (Budget(max_bytes=25), [Held("a", 10, 1, 1), Held("b", 10, 2, 0)], 10, ["b"]),
        (Budget(max_bytes=35), [Held("a", 10, 1, 0), Held("b", 10, 2, 0)], 10, []),
        (Budget(max_bytes=12), [Held("a", 10, 1, 0), Held("b", 1, 2, 0)], 11, ["a"]),
        (Budget(max_bytes=12), [Held("a", 10, 1, 0), Held("b", 1, 2, 0)], 12, ["a", "b"]),
    ],
)
def test_room_is_made_least_recently_used_first_and_never_from_a_busy_model(budget, held, size, evicted):
    assert room_for(size, held, budget) == evicted


def test_no_room_is_refused_with_the_figures():
    with pytest.raises(ValueError, match=r"max_loaded_bytes 15\) cannot hold 10 more bytes.*in flight: \['a'\]"):
        room_for(10, [Held("a", 10, 1, 2)], Budget(max_bytes=15))
    with pytest.raises(ValueError, match="cannot hold 20 more bytes"):
        room_for(20, [], Budget(max_bytes=15))


def test_a_model_added_at_run_time_is_taken_on_by_its_service_and_forgotten_once_removed(tmp_path, tiny_bert_path):
    """The wanted set's added entries: the worker of the entry's service takes it on and loads it; another service's
    worker leaves it; once removed it is unloaded, then gone from the status file."""
    clock = Clock()
    server = EmbentoConfig(models=[config(tiny_bert_path, "base", load="lazy")])
    shared = SharedModelSet(tmp_path, "test-", server)

    def accepts(cfg: ModelConfig) -> ModelConfig | None:  # `elsewhere` stands for a model of another service
        return None if cfg.served_model_name == "elsewhere" else cfg

    pins = Pins(server, shared)
    kept = Residency(
        ModelPool(load_model, []), list(server.models), shared, pins, "TextEmbedder-1", Budget(), clock, accepts
    )
    for name in ("added", "elsewhere"):
        entry = config(tiny_bert_path, name)
        shared.change(lambda models, entry=entry: models.add(entry, "admin"))  # type: ignore[misc]
    kept.step()
    assert "added" in kept.pool.models and statuses(kept)["added"].state == "loaded"
    assert "elsewhere" not in statuses(kept) and "elsewhere" not in kept.pool.models
    assert all(out.shape == (32,) for out in asyncio.run(kept.pool.run(rows(tiny_bert_path, "added"))))
    shared.change(lambda models: models.remove("added"))
    kept.step()
    assert "added" not in kept.pool.models and statuses(kept)["added"].state == "unloaded"
    kept.step()
    assert set(statuses(kept)) == {"base"}
