"""The embedding cache in real servers sharing a real Redis (testkit/redis_server.py): MiniLM with `cache: true`,
one server with two gateway workers and a second server of one; and CLIP with a cross-encoder. A hit answers the
bytes the miss computed in every encoding; workers and servers share hits through Redis; `Cache-Control` is read
from the request; Redis
killed (and restarted) or stalled under load fails no request."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from testkit.media import IMAGES, data_uri
from testkit.redis_server import RedisServer, running_redis
from tests.conftest import MINILM, SAMPLE, TINY_CLIP, TINY_RERANKER, free_port, metric, running_servers
from tests.servers import SharedServer
from tests.tolerance import assert_close

ENCODINGS = ("float", "base64", "int8", "uint8", "binary", "ubinary")
CLIENTS = 32
M3 = "bge-m3-cached"
STORE_TRAIL_S = 1.0  # a store may trail its answer by this much (the Redis write runs in the background)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis"), free_port()) as server:
        yield server


def _config(redis_server: RedisServer, workers: int) -> dict:
    return {
        "models": [{"model_id": MINILM, "cache": True}],
        "gateway_workers": workers,
        "cache": {"redis_url": redis_server.url, "memory_bytes": 8 * 1024 * 1024},
    }


@pytest.fixture(scope="module")
def two_servers(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A server of two gateway workers, and a server of one, both on the same Redis."""
    servers = [
        (tmp_path_factory.mktemp(name), _config(redis_server, workers))
        for name, workers in (("cache-a", 2), ("cache-b", 1))
    ]
    with running_servers(*servers) as [(first, _), (second, _)]:
        yield first, second


def _embed(url: str, texts: list[str], cache_control: str | None = None, **fields) -> dict:
    headers = {"Connection": "close", **({"Cache-Control": cache_control} if cache_control else {})}
    response = httpx.post(
        f"{url}/v1/embeddings", json={"input": texts, "model": MINILM, **fields}, headers=headers, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.json()


def _new_texts(count: int = 2) -> list[str]:
    return [f"a sentence never sent before, number {uuid.uuid4().hex[:12]}" for _ in range(count)]


def _cached(answer: dict) -> int:
    return answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def _stored(redis_server: RedisServer, keys_before: int, added: int, within_s: float = 10 * STORE_TRAIL_S) -> None:
    """Until Redis holds `added` more keys (the background writes are done)."""
    deadline = time.monotonic() + within_s
    while int(redis_server.command("DBSIZE").lstrip(":")) < keys_before + added:
        assert time.monotonic() < deadline, "the computed vectors never reached Redis"
        time.sleep(0.05)


def _computed_and_stored(url: str, redis_server: RedisServer, count: int) -> tuple[list[str], dict]:
    """New texts embedded until Redis holds them: a worker that saw Redis fail rests it a second, then one
    request probes it before the worker stores there again."""
    deadline = time.monotonic() + 30
    while True:
        texts, before = _new_texts(count), _keys(redis_server)
        computed = _embed(url, texts)
        try:
            _stored(redis_server, before, count, within_s=2 * STORE_TRAIL_S)
            return texts, computed
        except AssertionError:
            assert time.monotonic() < deadline, "Redis never took the computed vectors again"


def _keys(redis_server: RedisServer) -> int:
    return int(redis_server.command("DBSIZE").lstrip(":"))


@pytest.mark.server
@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("dimensions", [None, 64])
def test_a_hit_is_the_bytes_the_miss_computed(two_servers, encoding, dimensions):
    url, _ = two_servers
    texts, fields = _new_texts(), {"encoding_format": encoding, "dimensions": dimensions}
    computed = _embed(url, texts, "no-store", **fields)  # not stored: the next is a miss
    missed = _embed(url, texts, **fields)
    hit = _embed(url, texts, **fields)
    assert _cached(missed) == 0 and _cached(hit) == hit["usage"]["prompt_tokens"] == missed["usage"]["prompt_tokens"]
    assert hit["data"] == missed["data"] == computed["data"]
    assert "prompt_tokens_details" not in computed["usage"]  # no-store: the cache was not asked


@pytest.mark.server
def test_no_cache_computes_and_stores(two_servers, redis_server):
    url, other = two_servers
    texts, before = _new_texts(1), _keys(redis_server)
    refreshed = _embed(url, texts, "no-cache")
    assert "prompt_tokens_details" not in refreshed["usage"]
    _stored(redis_server, before, 1)
    assert _cached(_embed(other, texts)) == refreshed["usage"]["prompt_tokens"]


@pytest.mark.server
def test_two_servers_share_hits_through_redis(two_servers, redis_server):
    first, second = two_servers
    texts, before = _new_texts(3), _keys(redis_server)
    computed = _embed(first, texts)
    _stored(redis_server, before, 3)
    shared = _embed(second, texts)  # the second server never saw them: its memory tier is empty of them
    assert _cached(shared) == computed["usage"]["prompt_tokens"] and shared["data"] == computed["data"]


@pytest.mark.server
def test_two_gateway_workers_share_hits_through_redis(two_servers, redis_server):
    """Each fresh connection goes to either worker (the kernel's choice): a text computed by one worker and asked
    again until the other answers is a Redis hit there, not a memory one."""
    url, _ = two_servers
    redis_hits = metric(httpx.get(f"{url}/metrics").text, "embento_cache_hits_total", tier="redis")
    for _ in range(40):
        texts, before = _new_texts(1), _keys(redis_server)
        computed = _embed(url, texts)
        _stored(redis_server, before, 1)
        for _ in range(3):
            assert _embed(url, texts)["data"] == computed["data"]
        if metric(httpx.get(f"{url}/metrics").text, "embento_cache_hits_total", tier="redis") > redis_hits:
            return
    pytest.fail("no request was answered from Redis by the other worker in 40 tries")


class Load:
    """`CLIENTS` clients in a closed loop against `url`, each request half repeated, half new, until `stop`; the
    scenario moves on by answered requests (`answered`), not by time, so a slow machine tests as much."""

    def __init__(self, url: str, texts: list[str]) -> None:
        self.url, self.texts = url, texts
        self.statuses: list[int] = []
        self._progress = asyncio.Event()
        self._stopping = False

    async def run(self) -> list[int]:
        async def client(index: int) -> None:
            async with httpx.AsyncClient(timeout=60) as http:
                while not self._stopping:
                    body = {"input": [self.texts[index % len(self.texts)], *_new_texts(1)], "model": MINILM}
                    self.statuses.append((await http.post(f"{self.url}/v1/embeddings", json=body)).status_code)
                    self._progress.set()

        await asyncio.gather(*(client(i) for i in range(CLIENTS)))
        return self.statuses

    async def answered(self, count: int) -> None:
        """Until `count` more requests have been answered (a minute at most: a stuck server fails the test)."""
        target = len(self.statuses) + count
        while len(self.statuses) < target:
            self._progress.clear()
            await asyncio.wait_for(self._progress.wait(), timeout=60)

    def stop(self) -> None:
        self._stopping = True


@pytest.mark.server
def test_redis_killed_and_restarted_under_load_fails_no_request(two_servers, redis_server):
    url, other = two_servers

    async def scenario() -> list[int]:
        load = Load(url, _new_texts(8))
        running = asyncio.ensure_future(load.run())
        await load.answered(CLIENTS)  # every client under way, Redis serving
        redis_server.kill()
        await load.answered(2 * CLIENTS)  # answered while Redis is down
        redis_server.start()
        await load.answered(2 * CLIENTS)  # and once it is back
        load.stop()
        return await running

    statuses = asyncio.run(scenario())
    assert statuses and set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
    assert metric(httpx.get(f"{url}/metrics").text, "embento_cache_errors_total", tier="redis") > 0
    texts, computed = _computed_and_stored(url, redis_server, 2)
    assert _cached(_embed(other, texts)) == computed["usage"]["prompt_tokens"]  # hits resume through Redis


@pytest.mark.server
def test_a_stalled_redis_fails_no_request(two_servers, redis_server):
    url, _ = two_servers

    async def scenario() -> list[int]:
        load = Load(url, _new_texts(8))
        running = asyncio.ensure_future(load.run())
        await load.answered(CLIENTS)  # the first of them met Redis stalled (4 s: longer than any lookup waits)
        load.stop()
        return await running

    stall = redis_server.debug_sleep(4)
    try:
        statuses = asyncio.run(scenario())
    finally:
        stall.wait(timeout=30)
    assert statuses and set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}


def media_and_reranker_models(request: pytest.FixtureRequest) -> list[dict]:
    """CLIP, a cross-encoder and BGE-M3, each with `cache: true`: served by `kinds_and_dtypes_server`
    (tests/servers.py), which names no cache settings, so with the memory tier alone."""
    clip, reranker, m3 = (request.getfixturevalue(f"{name}_path") for name in ("tiny_clip", "tiny_reranker", "bge_m3"))
    return [
        {"model_id": str(clip), "served_model_name": TINY_CLIP, "cache": True},
        {"model_id": str(reranker), "served_model_name": TINY_RERANKER, "cache": True},
        {"model_id": str(m3), "served_model_name": M3, "backend": "torch", "cache": True},
    ]


@pytest.fixture(scope="module")
def media_and_reranker(kinds_and_dtypes_server: SharedServer) -> str:
    return kinds_and_dtypes_server.url


@pytest.mark.server
def test_images_are_cached_by_their_bytes(media_and_reranker):
    image, _ = IMAGES["jpeg"]
    first = {
        "input": [{"image": data_uri(image, "image/jpeg")}, {"text": f"a photo {uuid.uuid4().hex}"}],
        "model": TINY_CLIP,
    }
    computed = httpx.post(f"{media_and_reranker}/v1/embeddings", json=first, timeout=60).json()
    # The same bytes under another media type: the file's bytes make the key, not how they were sent.
    again = {**first, "input": [{"image": data_uri(image, "image/png")}, first["input"][1]]}
    hit = httpx.post(f"{media_and_reranker}/v1/embeddings", json=again, timeout=60).json()
    assert _cached(hit) == hit["usage"]["prompt_tokens"] == computed["usage"]["prompt_tokens"]
    assert _cached(computed) == 0 and hit["data"] == computed["data"]


@pytest.mark.server
def test_rerank_pairs_are_cached(media_and_reranker):
    body = {"model": TINY_RERANKER, "query": f"which animal {uuid.uuid4().hex}", "documents": ["a fox", "a dog"]}
    computed = httpx.post(f"{media_and_reranker}/v1/rerank", json=body, timeout=60).json()
    hit = httpx.post(f"{media_and_reranker}/v1/rerank", json={**body, "top_n": 1}, timeout=60).json()
    assert _cached(computed) == 0 and _cached(hit) == hit["usage"]["prompt_tokens"]
    assert hit["results"] == computed["results"][:1]


@pytest.mark.server
def test_the_cache_series_the_dashboard_and_alerts_read_are_exported(two_servers):
    from tests.server.test_observability import CACHE_SERIES, alert_expressions, dashboard_expressions, metric_names

    exported = {sample["name"] for sample in SAMPLE.finditer(httpx.get(f"{two_servers[1]}/metrics").text)}
    read = set().union(*map(metric_names, [*dashboard_expressions(), *alert_expressions().values()]))
    cache_series = {name for name in read if name.startswith(CACHE_SERIES)}
    assert {"embento_cache_hits_total", "embento_cache_errors_total"} <= cache_series
    assert cache_series - exported == set()


def assert_same_ranking(got: list[dict], expected: list[dict]) -> None:
    """The same documents in the same order, each score equal within float32's precision: a maximum-similarity sum
    over cached vectors may add in another order than over fresh ones."""
    assert [r["index"] for r in got] == [r["index"] for r in expected]
    assert_close([r["relevance_score"] for r in got], [r["relevance_score"] for r in expected])
    modes = sorted(expected[0]["scores"])
    assert_close([[r["scores"][m] for m in modes] for r in got], [[r["scores"][m] for m in modes] for r in expected])


def _rerank(url: str, body: dict, cache_control: str | None = None) -> dict:
    headers = {"Cache-Control": cache_control} if cache_control else {}
    response = httpx.post(f"{url}/v1/rerank", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.server
def test_a_model_that_ranks_by_its_own_outputs_caches_each_text_in_its_role(media_and_reranker):
    documents = [f"document {i} {uuid.uuid4().hex}" for i in range(3)]
    body = {"model": M3, "query": f"a query {uuid.uuid4().hex}", "documents": documents, "return_scores": True}
    computed = _rerank(media_and_reranker, body, "no-store")
    missed, hit = _rerank(media_and_reranker, body), _rerank(media_and_reranker, body)
    assert _cached(missed) == 0 and _cached(hit) == hit["usage"]["prompt_tokens"]
    for answer in (hit, missed):  # every mode's score from cached outputs as computed, to float32's last digits
        assert_same_ranking(answer["results"], computed["results"])
    other = _rerank(media_and_reranker, {**body, "query": f"another query {uuid.uuid4().hex}"})
    assert 0 < _cached(other) < other["usage"]["prompt_tokens"]  # the documents were cached, the query was not
    # A document given as the query is framed as a query: not the document's entry.
    as_query = _rerank(media_and_reranker, {**body, "query": documents[0], "documents": [f"new {uuid.uuid4().hex}"]})
    assert _cached(as_query) == 0


@pytest.mark.server
def test_image_documents_are_cached_by_their_bytes(media_and_reranker):
    documents = [data_uri(IMAGES["png"][0], "image/png"), data_uri(IMAGES["jpeg"][0], "image/jpeg")]
    body = {"model": TINY_CLIP, "query": f"a photo {uuid.uuid4().hex}", "documents": documents}
    computed, hit = _rerank(media_and_reranker, body), _rerank(media_and_reranker, body)
    assert _cached(hit) == hit["usage"]["prompt_tokens"] and hit["results"] == computed["results"]
