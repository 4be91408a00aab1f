"""The embedding cache (gateway/cache/): its stored values, the memory tier's budget, the keys, and the real
`Engine` answering through it over the fake model service: only misses reach the service, hits come back as the
bytes a miss computed, and `Cache-Control` and errors are honoured. The Redis tier's tests run a real Redis
(test_redis_tier.py); the server's, tests/server/test_cache.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.responses import JSONResponse

from config.keys_file import Tenant
from config.settings import ModelConfig
from gateway.answering import answered
from gateway.cache.contexts import embed_context, input_items
from gateway.cache.keys import CacheKeys, model_identity, weights_identity
from gateway.cache.memory import MemoryTier, entry_bytes
from gateway.cache.policy import REQUEST_POLICY, policy_of
from gateway.cache.values import HEADER, Entry, decode, encode
from gateway.engine import Engine
from gateway.queries import EmbedQuery, InputItem, LongInput
from gateway.tenants.keys import TENANT
from gateway.wire import infinity, openai
from gateway.wire.common import RerankRequest
from models.base import Truncation
from tests.unit.gateway.fake_engine import CLASSIFIER, EMBEDDER, INFOS, RERANKER, FakeModelService


# Stored values
@pytest.mark.parametrize(
    "output",
    [
        np.arange(384, dtype=np.float32) / 7,
        np.ones((5, 8), dtype=np.float32),
        np.zeros((2, 0), dtype=np.float32),  # a sparse output with no active entry
    ],
    ids=["vector", "multi-vector", "empty-sparse"],
)
def test_a_value_reads_back_as_the_same_bytes(output):
    entry = decode(encode(Entry(output, 17)))
    assert entry is not None and entry.tokens == 17
    assert entry.output.dtype == output.dtype and entry.output.shape == output.shape
    assert entry.output.tobytes() == output.tobytes()
    assert not entry.output.flags.writeable  # a hit shares the stored bytes: nothing may write through it


def test_a_value_that_is_not_whole_or_of_another_version_is_a_miss():
    value = encode(Entry(np.ones(4, dtype=np.float32), 3))
    assert value is not None
    other_version = value[:4] + bytes([value[4] + 1]) + value[5:]
    for broken in (b"", b"garbage", value[:-1], value + b"\0", other_version, b"X" + value[1:]):
        assert decode(broken) is None, broken
    assert decode(value[: HEADER.size]) is None


# The memory tier
def test_the_memory_tier_drops_the_least_recently_used_within_its_budget():
    value = bytes(1000)
    size = entry_bytes(b"k" * 32, value)
    tier = MemoryTier(3 * size)
    keys = [bytes([i]) * 32 for i in range(4)]
    for key in keys[:3]:
        tier.put(key, value)
    assert tier.get(keys[0]) == value  # now the most recently used
    tier.put(keys[3], value)
    assert tier.get(keys[1]) is None and all(tier.get(k) == value for k in (keys[0], keys[2], keys[3]))
    assert tier.held_bytes == 3 * size <= tier.budget_bytes
    tier.put(keys[3], value)  # the same key again: replaced, not counted twice
    assert len(tier) == 3 and tier.held_bytes == 3 * size
    tier.put(b"big" * 11, bytes(4 * size))  # larger than the whole budget: not kept, nothing evicted for it
    assert len(tier) == 3 and tier.get(b"big" * 11) is None


# Keys
def test_a_hub_checkpoint_is_its_commit_and_a_folder_its_files(tmp_path: Path):
    snapshot = tmp_path / "models--org--name" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    assert weights_identity("org/name", snapshot) == f"hub:org/name@{'a' * 40}"
    folder = tmp_path / "local"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights-1")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "lock").write_text("download bookkeeping")
    before = weights_identity(str(folder), folder)
    (folder / ".cache" / "lock").write_text("changed")
    assert weights_identity(str(folder), folder) == before
    (folder / "model.safetensors").write_bytes(b"weights-2")
    assert weights_identity(str(folder), folder) != before


def test_the_model_identity_changes_with_what_makes_outputs_only(tmp_path: Path):
    (tmp_path / "config.json").write_text("{}")
    info = INFOS[EMBEDDER]
    base = model_identity(ModelConfig(model_id=str(tmp_path)), info, tmp_path)
    same = [
        ModelConfig(model_id=str(tmp_path), **settings)
        for settings in (
            {"device": "cpu"},
            {"batch_size": 8},
            {"quantization": "per_dimension"},
            {"served_model_name": "x"},
            {"cache": True},
        )
    ]
    assert all(model_identity(cfg, info, tmp_path) == base for cfg in same)
    changed = [
        ModelConfig(model_id=str(tmp_path), **settings)
        for settings in (
            {"pooling": "cls"},
            {"normalize": False},
            {"max_seq_length": 64},
            {"prompts": {"query": "q: "}},
        )
    ]
    assert all(model_identity(cfg, info, tmp_path) != base for cfg in changed)
    cfg = ModelConfig(model_id=str(tmp_path))
    for other in ({"backend": "onnx"}, {"dtype": "float16"}, {"kind": "sparse"}):
        assert model_identity(cfg, info.__class__(**{**info.to_dict(), **other}), tmp_path) != base


def _key(query: EmbedQuery, prompt: str = "", identity: bytes = b"m" * 32) -> bytes:
    return CacheKeys(identity).keys(embed_context(query, prompt), input_items(query.items))[0]


def test_keys_differ_by_prompt_truncation_input_type_and_model_not_by_output_controls():
    text = (InputItem("text", "what is a fox"),)
    base = _key(EmbedQuery(text))
    different = [
        _key(EmbedQuery(text), prompt="query: "),
        _key(EmbedQuery(text), prompt="passage: "),
        _key(EmbedQuery(text, truncation=Truncation(max_tokens=8))),
        _key(EmbedQuery(text, truncation=Truncation(side="left"))),
        _key(EmbedQuery(text, input_type="search_query")),
        _key(EmbedQuery(text, input_type="search_document")),
        _key(EmbedQuery(text, normalize=False)),
        _key(EmbedQuery(text, long_input=LongInput.MEAN)),
        _key(EmbedQuery(text, representations=("dense", "sparse"))),
        _key(EmbedQuery(text), identity=b"n" * 32),
        _key(EmbedQuery((InputItem("image", "what is a fox"),))),
    ]
    assert len({base, *different}) == len(different) + 1
    same = [
        EmbedQuery(text, dimensions=8),
        EmbedQuery(text, output_types=("int8", "base64")),
        EmbedQuery(text, max_active_dims=4),
        EmbedQuery(text, model="alias"),
    ]
    assert all(_key(query) == base for query in same)


@pytest.mark.parametrize(
    "header, read, write",
    [
        ("", True, True),
        ("no-cache", False, True),
        ("no-store", False, False),
        ("max-age=0, No-Store", False, False),
        ("max-age=60", True, True),
        ("max-age=0", False, True),
        ("private, max-age = 0", False, True),
        ("max-age=00", False, True),
        ('max-age="30"', True, True),
    ],
)
def test_cache_control_directives(header, read, write):
    policy = policy_of(header)
    assert (policy.read, policy.write) == (read, write)


# The engine through the cache (memory tier; the fake service records the rows it is sent)
async def _post(engine: Engine, adapter: Any, body_model: Any, body: dict, cache_control: str = "") -> dict:
    token = REQUEST_POLICY.set(policy_of(cache_control))
    try:
        result = await answered(adapter, engine, body_model.model_validate(body))
    finally:
        REQUEST_POLICY.reset(token)
    if isinstance(result, JSONResponse) or hasattr(result, "body"):
        return {"status": result.status_code, **json.loads(result.body)}
    return result.model_dump() if hasattr(result, "model_dump") else result


def _embed(engine: Engine, texts: list[str], cache_control: str = "", **fields: Any):
    return _post(
        engine, openai.embed, openai.EmbeddingRequest, {"input": texts, "model": EMBEDDER, **fields}, cache_control
    )


def _rows_sent(service: FakeModelService) -> int:
    sent = len(service.rows)
    service.rows.clear()
    return sent


def test_only_misses_reach_the_model_and_hits_are_the_bytes_a_miss_computed(serve):
    async def scenario(engine: Engine) -> None:
        service = engine.calls.clients["TextEmbedder"]
        engine.cache.enable(EMBEDDER, b"m" * 32)
        first = await _embed(engine, ["a fox", "a dog"], encoding_format="base64")
        assert _rows_sent(service) == 2 and first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        again = await _embed(engine, ["a fox", "a dog"], encoding_format="base64")
        assert _rows_sent(service) == 0
        assert again["data"] == first["data"] and again["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"]
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"]
        mixed = await _embed(engine, ["a cat", "a dog", "a cat"], encoding_format="base64")
        assert _rows_sent(service) == 1  # the new text once, though given twice
        assert mixed["data"][1]["embedding"] == first["data"][1]["embedding"]
        assert mixed["data"][0]["embedding"] == mixed["data"][2]["embedding"]
        cut = await _embed(engine, ["a fox"], dimensions=8)
        fresh = await _embed(engine, ["a fox"], "no-store", dimensions=8)
        assert _rows_sent(service) == 1 and cut["data"] == fresh["data"]  # output controls apply after the cache

    serve(scenario)


def test_each_tenant_has_its_own_entries_unless_shared(serve):
    """A hit would tell one tenant what another embedded: tenants of the keys file do not share entries, the tenant
    `default` keeps its keys, and `cache.share_across_tenants` shares them all."""

    async def as_tenant(engine: Engine, name: str, texts: list[str]) -> dict:
        token = TENANT.set(Tenant(name=name))
        try:
            return await _embed(engine, texts)
        finally:
            TENANT.reset(token)

    async def scenario(engine: Engine) -> None:
        service = engine.calls.clients["TextEmbedder"]
        engine.cache.enable(EMBEDDER, b"m" * 32)
        first = await as_tenant(engine, "acme", ["a secret plan"])
        assert _rows_sent(service) == 1
        other = await as_tenant(engine, "globex", ["a secret plan"])
        assert _rows_sent(service) == 1 and other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        again = await as_tenant(engine, "acme", ["a secret plan"])
        assert _rows_sent(service) == 0 and again["data"] == first["data"]
        await _embed(engine, ["a public text"])  # the tenant `default`: the keys it had before tenants
        keys = engine.cache.keys(EMBEDDER, {"op": "x"}, [b"T"])
        assert _rows_sent(service) == 1 and keys == CacheKeys(b"m" * 32).keys({"op": "x"}, [b"T"])
        engine.cache.shared_across_tenants = True
        shared = await as_tenant(engine, "initech", ["a public text"])
        assert _rows_sent(service) == 0 and shared["usage"]["prompt_tokens_details"]["cached_tokens"] > 0

    serve(scenario)


def test_no_cache_refreshes_no_store_leaves_the_cache_alone(serve):
    async def scenario(engine: Engine) -> None:
        service = engine.calls.clients["TextEmbedder"]
        engine.cache.enable(EMBEDDER, b"m" * 32)
        unstored = await _embed(engine, ["not kept"], "no-store")
        assert _rows_sent(service) == 1 and "prompt_tokens_details" not in unstored["usage"]
        await _embed(engine, ["not kept"])
        assert _rows_sent(service) == 1  # no-store kept nothing
        await _embed(engine, ["not kept"], "no-cache")
        assert _rows_sent(service) == 1  # no-cache computes though it is stored
        hit = await _embed(engine, ["not kept"])
        assert _rows_sent(service) == 0 and hit["usage"]["prompt_tokens_details"]["cached_tokens"] > 0

    serve(scenario)


def test_a_failed_request_stores_nothing_and_names_its_own_input(serve):
    async def scenario(engine: Engine) -> None:
        service = engine.calls.clients["TextEmbedder"]
        engine.cache.enable(EMBEDDER, b"m" * 32)
        await _embed(engine, ["short"], truncate=False)
        _rows_sent(service)
        refused = await _embed(engine, ["kept out", "short", "word " * 400], truncate=False)
        assert refused["status"] == 400 and refused["error"]["message"].startswith("input[2] is "), refused
        assert _rows_sent(service) == 0
        await _embed(engine, ["kept out"])
        assert _rows_sent(service) == 1  # the failed request's other new input was not stored

    serve(scenario)


def test_rerank_pairs_and_classify_inputs_are_cached(serve):
    async def scenario(engine: Engine) -> None:
        service = engine.calls.clients["Reranker"]
        for name in (RERANKER, CLASSIFIER):
            engine.cache.enable(name, name.encode().ljust(32, b"-"))
        body = {"model": RERANKER, "query": "a fox", "documents": ["foxes", "dogs"]}
        first = await _post(engine, infinity.rerank, RerankRequest, body)
        assert _rows_sent(service) == 2
        more = await _post(
            engine, infinity.rerank, RerankRequest, {**body, "documents": ["dogs", "cats", "foxes"], "raw_scores": True}
        )
        assert _rows_sent(service) == 1
        scores = {r["index"]: r["relevance_score"] for r in first["results"]}
        raw = {r["index"]: r["relevance_score"] for r in more["results"]}
        assert np.allclose(1 / (1 + np.exp(-np.array([raw[2], raw[0]]))), [scores[0], scores[1]], atol=1e-5)
        other_query = await _post(engine, infinity.rerank, RerankRequest, {**body, "query": "a dog"})
        assert _rows_sent(service) == 2 and other_query["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        texts = {"model": CLASSIFIER, "input": ["good", "bad"]}
        first = await _post(engine, infinity.classify, infinity.ClassifyRequest, texts)
        again = await _post(engine, infinity.classify, infinity.ClassifyRequest, texts)
        assert _rows_sent(service) == 2 and again["data"] == first["data"]
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"]

    serve(scenario)


def test_a_model_without_the_cache_answers_without_cached_tokens(serve):
    async def scenario(engine: Engine) -> None:
        service = engine.calls.clients["TextEmbedder"]
        for _ in range(2):
            answer = await _embed(engine, ["a fox"])
            assert _rows_sent(service) == 1 and "prompt_tokens_details" not in answer["usage"]

    serve(scenario)


def test_token_ids_and_windowed_long_texts_are_cached_with_all_their_tokens(serve):
    async def scenario(engine: Engine) -> None:
        service = engine.calls.clients["TextEmbedder"]
        engine.cache.enable(EMBEDDER, b"m" * 32)
        ids = await _embed(engine, [[101, 2000, 102], [101, 2001, 102]])
        assert _rows_sent(service) == 2
        again = await _embed(engine, [[101, 2000, 102], [101, 2001, 102]])
        assert _rows_sent(service) == 0 and again["data"] == ids["data"]
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 6
        long = ["word " * 600, "short"]  # past MiniLM's 256 tokens: several windows, one vector
        windowed = await _embed(engine, long, long_input="mean")
        windows = _rows_sent(service)
        assert windows > 2
        hit = await _embed(engine, long, long_input="mean")
        assert _rows_sent(service) == 0 and hit["data"] == windowed["data"]
        assert hit["usage"]["prompt_tokens_details"]["cached_tokens"] == windowed["usage"]["prompt_tokens"]
        truncated = await _embed(engine, long)  # the same texts cut to the window: another key
        assert _rows_sent(service) == 2 and truncated["data"][0] != windowed["data"][0]

    serve(scenario)


def test_an_answer_with_hits_is_held_to_max_response_bytes_as_a_whole(serve):
    async def scenario(engine: Engine) -> None:
        engine.cache.enable(EMBEDDER, b"m" * 32)
        engine.config.max_response_bytes = 12_000  # one 384-float vector as JSON fits, two do not
        assert "data" in await _embed(engine, ["cached"])
        refused = await _embed(engine, ["cached", "new"])  # the miss alone fits; the answer would not
        assert refused["status"] == 400 and "max_response_bytes" in refused["error"]["message"]

    serve(scenario)


def test_a_mixed_input_is_keyed_by_all_its_parts_in_order():
    from gateway.queries import InputItem, mixed_input

    image = b"\x89PNG bytes"
    text, picture = InputItem("text", "a cat"), InputItem("image", "data:image/png;base64,AA==")
    items = [mixed_input((text, picture)), mixed_input((InputItem("text", "a dog"), picture)), picture, text]
    payloads = [("a cat", image), ("a dog", image), (image,), ("a cat",)]
    mixed_cat, mixed_dog, alone, said = input_items(items, payloads)
    assert len({mixed_cat, mixed_dog, alone, said}) == 4
    assert alone == input_items([picture], [(image,)]).__next__() == b"I" + image  # one part: keyed as before
