"""A model service's pool loads and drops models while it serves (issue 53's base): through the real loading
path (`load_model`, the start's), a model loaded at run time answers as the same checkpoint loaded on its own;
one dropped is collected, its rows then come back marked not loaded (the gateway's 503), and the others serve
throughout."""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path

import pytest

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.base import NOT_LOADED, TokenizedText
from models.inference.auto_backend import load_model
from models.inference.text_encoder import TextEncoder
from models.preprocessing.text_tokenizer import TextTokenizer
from runners.pool import ModelPool
from testkit.sentences import make_sentences
from tests.tolerance import assert_same_vectors

SENTENCES = make_sentences(5)


def config(path: Path, name: str) -> ModelConfig:
    return ModelConfig(model_id=str(path), served_model_name=name, device="cpu", backend="torch")


def rows(path: Path, name: str) -> list[TokenizedText]:
    return TokenizedText.rows(name, TextTokenizer(path, config(path, name)).encode_texts(SENTENCES))


@pytest.fixture
def pool(minilm_path: Path) -> ModelPool:
    return ModelPool(load_model, [config(minilm_path, "first")])


def test_a_model_loaded_at_run_time_answers_as_its_checkpoint_as_the_first_serves_on(pool, minilm_path, tiny_bert_path):
    first_before = asyncio.run(pool.run(rows(minilm_path, "first")))
    info = pool.load(config(tiny_bert_path, "second"))
    assert info.served_model_name == "second" and set(pool.models) == {"first", "second"}
    second = asyncio.run(pool.run(rows(tiny_bert_path, "second")))
    alone = TextEncoder(tiny_bert_path, config(tiny_bert_path, "second")).forward(rows(tiny_bert_path, "second"))
    assert_same_vectors(second, alone)
    assert_same_vectors(asyncio.run(pool.run(rows(minilm_path, "first"))), first_before)


def test_a_dropped_model_is_collected_and_its_rows_fail_while_the_others_serve(pool, minilm_path, tiny_bert_path):
    pool.load(config(tiny_bert_path, "second"))
    dropped = weakref.ref(pool.models["second"])
    pool.unload("second")
    assert dropped() is None  # nothing keeps its weights: its memory can go back
    outputs = asyncio.run(pool.run(rows(tiny_bert_path, "second")))
    assert all(output is NOT_LOADED for output in outputs)
    assert all(output.shape == (384,) for output in asyncio.run(pool.run(rows(minilm_path, "first"))))
    with pytest.raises(KeyError):
        pool.unload("second")


def test_loading_a_served_name_again_replaces_its_model_and_collects_the_old(pool, minilm_path, tiny_bert_path):
    old = weakref.ref(pool.models["first"])
    pool.load(config(tiny_bert_path, "first"))
    assert old() is None
    alone = TextEncoder(tiny_bert_path, config(tiny_bert_path, "first")).forward(rows(tiny_bert_path, "first"))
    assert_same_vectors(asyncio.run(pool.run(rows(tiny_bert_path, "first"))), alone)


def test_a_load_that_fails_raises_and_leaves_the_pool_as_it_was(pool, tmp_path, minilm_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        pool.load(config(tmp_path / "missing", "broken"))
    assert set(pool.models) == {"first"} and pool.failed == {}
    assert all(output.shape == (384,) for output in asyncio.run(pool.run(rows(minilm_path, "first"))))


def test_a_live_call_is_answered_while_a_batch_call_still_runs(minilm_path):
    """The torch thread is held mid-batch (no timing): a live query's call, on its own thread, is answered all the
    same, with the vectors the model gives it alone; the batch is answered once released."""
    import threading

    pool = ModelPool(load_model, [config(minilm_path, "first")], threads=2)
    assert pool.models["first"].info.live_lane  # torch on a CPU: passes share the cores
    release = threading.Event()
    pool._torch_thread.submit(release.wait)
    loop = asyncio.new_event_loop()
    try:
        batch = loop.create_task(pool.run(rows(minilm_path, "first")))
        while not pool.busy("first"):  # until the batch call is in flight, held on the torch thread
            loop.run_until_complete(asyncio.sleep(0))
        query = rows(minilm_path, "first")[:1]
        live = loop.run_until_complete(asyncio.wait_for(pool.run(query, live=True), 60))
        assert not batch.done()
        assert_same_vectors(live[0], pool.models["first"].forward(query)[0])
        release.set()
        assert len(loop.run_until_complete(batch)) == len(SENTENCES)
    finally:
        release.set()
        loop.close()
