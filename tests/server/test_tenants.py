"""Tenants (issue 38) on a real server of two gateway workers: each API key of the keys file sees its own limits,
through the OpenAI SDK and OpenAI's headers; its models only; its own bulk-job files; a reload without a restart;
usage by tenant; and no secret anywhere a client or an operator can read."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest
import yaml
from openai import OpenAI

from config.keys_file import new_secret
from tests.conftest import MINILM, ROOT, background, free_port, metric, running_server, server_env

pytestmark = pytest.mark.server

SENTENCE = "the quick brown fox jumps over the lazy dog"
LONG_REQUEST = [f"{SENTENCE}, number {i}" for i in range(2048)]  # seconds of work on 2 cores
TENANTS = {  # name: the keys file's settings beside its hash
    "counter": {"requests_per_minute": 30},
    "burst": {"requests_per_minute": 20},
    "tokens": {"tokens_per_minute": 120},
    "single": {"max_concurrent_requests": 1},
    "outsider": {"models": ["some-other-model"]},
    "owner": {"max_stored_bytes": 4000, "max_queued_lines": 3},
    "other": {},
}
LEGACY_KEY = "legacy-key-0123456789"  # `api_key`: the tenant `default`, unlimited


class Deployment:
    def __init__(self, url: str, pid: int, folder: Path, keys: dict[str, str]) -> None:
        self.url, self.pid, self.folder, self.keys = url, pid, folder, keys

    @property
    def log(self) -> str:
        return (self.folder / "server.log").read_text(errors="replace")

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}", "Connection": "close"}

    def embed(
        self, tenant: str, texts: list[str] | str = SENTENCE, path: str = "/v1/embeddings", timeout: float = 120
    ) -> httpx.Response:
        body = {"input": texts, "model": MINILM} if path == "/v1/embeddings" else {"inputs": texts}
        return httpx.post(f"{self.url}{path}", json=body, headers=self.headers(tenant), timeout=timeout)

    def sdk(self, tenant: str, **options) -> OpenAI:
        return OpenAI(base_url=f"{self.url}/v1", api_key=self.keys[tenant], **options)


def keys_file_entries(keys: dict[str, str]) -> list[dict]:
    return [
        {"name": name, "key_sha256": hashlib.sha256(keys[name].encode()).hexdigest(), **settings}
        for name, settings in TENANTS.items()
    ]


def write_keys(path: Path, entries: list[dict]) -> None:
    draft = path.with_suffix(".draft")
    draft.write_text(yaml.safe_dump({"keys": entries}))
    os.chmod(draft, 0o600)
    os.replace(draft, path)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("tenants")
    keys = {name: new_secret() for name in TENANTS}
    write_keys(folder / "keys.yaml", keys_file_entries(keys))
    config = {
        "models": [{"model_id": MINILM}],
        "gateway_workers": 2,
        "api_key": [LEGACY_KEY],
        "auth": {"keys_file": str(folder / "keys.yaml")},
        "log": {"access": "json"},
        "jobs": {"data_dir": str(folder / "jobs")},
    }
    with running_server(folder, config) as (url, pid):
        yield Deployment(url, pid, folder, {**keys, "default": LEGACY_KEY})


def remaining(response: httpx.Response, kind: str) -> int:
    return int(response.headers[f"x-ratelimit-remaining-{kind}"])


def test_the_request_headers_count_down_across_both_gateway_workers(deployment):
    """Each request on a fresh connection, so either worker answers: the count is the server's, not a worker's.
    The bucket refills one request every 2 s (30 a minute), which the bound allows for."""
    started = time.monotonic()
    for taken in range(1, 11):
        response = deployment.embed("counter")
        assert response.status_code == 200, response.text
        assert response.headers["x-ratelimit-limit-requests"] == "30"
        refilled = int((time.monotonic() - started) / 2)
        assert 30 - taken <= remaining(response, "requests") <= 30 - taken + refilled
        assert response.headers["x-ratelimit-reset-requests"].endswith("s")
        assert "x-ratelimit-limit-tokens" not in response.headers  # a limit the key does not have


def throttled(deployment: Deployment, tenant: str, limit: str) -> float:
    metrics = httpx.get(f"{deployment.url}/metrics", headers=deployment.headers("other")).text
    return metric(metrics, "embento_tenant_throttled_total", tenant=tenant, limit=limit)


def test_over_the_rate_is_a_429_the_sdk_waits_out(deployment):
    before = throttled(deployment, "burst", "requests")
    for _ in range(25):
        response = deployment.embed("burst")
        if response.status_code == 429:
            break
        assert response.status_code == 200, response.text
    else:
        pytest.fail("20 requests a minute let 25 through at once")
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error", error
    assert remaining(response, "requests") == 0
    wait_ms = int(response.headers["retry-after-ms"])
    assert 0 < wait_ms <= 3000 and int(response.headers["retry-after"]) == -(-wait_ms // 1000)
    tei = deployment.embed("burst", path="/embed")
    assert tei.status_code == 429 and set(tei.json()) == {"error", "error_type"}, tei.text
    assert throttled(deployment, "burst", "requests") - before >= 2  # both 429s, counted by tenant and limit

    started = time.monotonic()
    answer = deployment.sdk("burst", max_retries=3).embeddings.create(model=MINILM, input=SENTENCE)
    assert len(answer.data[0].embedding) == 384
    assert time.monotonic() - started >= 0.5 * wait_ms / 1000  # it waited, as Retry-After asked


def test_tokens_per_minute_count_what_usage_counts(deployment):
    sdk = deployment.sdk("tokens", max_retries=0)
    previous = 120
    for _ in range(20):
        raw = sdk.embeddings.with_raw_response.create(model=MINILM, input=[SENTENCE] * 3)
        used = raw.parse().usage.prompt_tokens
        left = int(raw.headers["x-ratelimit-remaining-tokens"])
        assert left <= max(0, previous - used) + 2  # 2 tokens a second refill
        previous = left
        if left == 0:
            break
    response = deployment.embed("tokens")
    assert response.status_code == 429 and "tokens per minute" in response.json()["error"]["message"]
    assert int(response.headers["retry-after-ms"]) > 0


def test_concurrency_is_counted_per_key_and_freed(deployment):
    """A long request and short ones of a key allowed one at a time: whichever holds the slot, the others meanwhile
    are 429s naming concurrency (the long one too, should a short one have got in first); another key is not
    held; and the slot is free again after."""

    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as http:

            def post(tenant: str, texts: list[str] | str) -> asyncio.Future:
                return asyncio.ensure_future(
                    http.post(
                        f"{deployment.url}/v1/embeddings",
                        json={"input": texts, "model": MINILM},
                        headers=deployment.headers(tenant),
                    )
                )

            long = post("single", LONG_REQUEST)
            answers = []
            while not long.done() and not any(answer.status_code == 429 for answer in answers):
                await asyncio.sleep(0.05)
                answers.append(await post("single", "hi"))
            other = await post("other", "hi")
            assert other.status_code == 200  # another key is not held by this one's limit
            return [await long, *answers]

    answers = asyncio.run(scenario())
    refused = [answer for answer in answers if answer.status_code == 429]
    assert refused and all("concurrent requests" in answer.json()["error"]["message"] for answer in refused)
    assert {answer.status_code for answer in answers} <= {200, 429}
    assert deployment.embed("single").status_code == 200  # the slot was given back


def test_a_model_outside_the_keys_list_is_not_named(deployment):
    """Refused as a model that is not served: the same 404, naming only what the client sent."""
    response = deployment.embed("outsider")
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    unknown = httpx.post(
        f"{deployment.url}/v1/embeddings",
        json={"input": "hi", "model": "no-such-model"},
        headers=deployment.headers("outsider"),
    )
    assert response.json()["error"]["message"] == unknown.json()["error"]["message"].replace("no-such-model", MINILM)
    assert response.json()["error"]["message"].endswith("served models: []")
    no_model = httpx.post(
        f"{deployment.url}/v1/embeddings", json={"input": "hi"}, headers=deployment.headers("outsider"), timeout=60
    )
    assert no_model.status_code == 400 and MINILM not in no_model.text
    models = httpx.get(f"{deployment.url}/v1/models", headers=deployment.headers("outsider")).json()
    assert models["data"] == [] and MINILM not in json.dumps(models)
    info = httpx.get(f"{deployment.url}/info", headers=deployment.headers("outsider")).json()
    assert info["models"] == [] and MINILM not in json.dumps(info)
    mine = httpx.get(f"{deployment.url}/v1/models", headers=deployment.headers("other")).json()
    assert [card["id"] for card in mine["data"]] == [MINILM]


def test_wrong_keys_are_401s_and_the_configured_key_is_default_without_limits(deployment):
    for headers in ({}, {"Authorization": "Bearer " + new_secret()}, {"Authorization": deployment.keys["other"]}):
        response = httpx.post(f"{deployment.url}/v1/embeddings", json={"input": "hi"}, headers=headers)
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    legacy = deployment.embed("default")
    assert legacy.status_code == 200 and not any(name.startswith("x-ratelimit") for name in legacy.headers)


def test_bulk_job_files_are_their_keys_own_and_within_its_limits(deployment):
    owner, other = deployment.sdk("owner", max_retries=0), deployment.sdk("other", max_retries=0)
    line = {"method": "POST", "url": "/v1/embeddings", "body": {"model": MINILM, "input": SENTENCE}}

    def lines(count: int) -> bytes:
        return "".join(json.dumps({**line, "custom_id": f"r{i}"}) + "\n" for i in range(count)).encode()

    uploaded = owner.files.create(file=("in.jsonl", lines(2)), purpose="batch")
    assert uploaded.id not in [item.id for item in other.files.list()]
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(uploaded.id)
    with pytest.raises(openai.BadRequestError):  # not a file `other` can see
        other.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
    batch = owner.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
    assert batch.id not in [item.id for item in other.batches.list()]
    with pytest.raises(openai.NotFoundError):
        other.batches.cancel(batch.id)
    four = owner.files.create(file=("four.jsonl", lines(4)), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="lines in unfinished batches"):  # past max_queued_lines: 3
        owner.batches.create(input_file_id=four.id, endpoint="/v1/embeddings", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="may keep 4000 bytes"):  # past max_stored_bytes
        owner.files.create(file=("big.jsonl", lines(40)), purpose="batch")
    deadline = time.monotonic() + 120
    while (found := owner.batches.retrieve(batch.id)).status != "completed" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert found.status == "completed" and found.request_counts.completed == 2
    output = owner.files.content(found.output_file_id).text.splitlines()
    assert json.loads(output[0])["response"]["status_code"] == 200
    with pytest.raises(openai.NotFoundError):
        other.files.content(found.output_file_id)


def test_usage_by_tenant_in_metrics_and_the_access_log(deployment):
    before = metric(
        httpx.get(f"{deployment.url}/metrics", headers=deployment.headers("other")).text,
        "embento_tenant_tokens_total",
        tenant="other",
    )
    answer = deployment.embed("other", [SENTENCE, SENTENCE]).json()
    metrics = httpx.get(f"{deployment.url}/metrics", headers=deployment.headers("other")).text
    after = metric(metrics, "embento_tenant_tokens_total", tenant="other", model=MINILM)
    assert after - before == answer["usage"]["prompt_tokens"]
    assert metric(metrics, "embento_tenant_requests_total", tenant="other", model=MINILM, status="200") >= 1
    lines = [json.loads(line) for line in deployment.log.splitlines() if line.startswith('{"time"')]
    mine = [line for line in lines if line["tenant"] == "other" and line["tokens"] == answer["usage"]["prompt_tokens"]]
    assert mine and mine[-1]["route"] == "/v1/embeddings" and mine[-1]["status"] == 200 and mine[-1]["model"] == MINILM
    assert {"time", "tenant", "method", "route", "model", "tokens", "status", "duration_ms"} == set(mine[-1])


def test_keys_reload_on_change_and_sighup_without_dropping_requests(deployment):
    late = new_secret()
    gateway_pids = sorted(child.pid for child in psutil.Process(deployment.pid).children(recursive=True))
    in_flight: dict[str, int] = {}
    worker = threading.Thread(
        target=lambda: in_flight.update(status=deployment.embed("other", LONG_REQUEST).status_code)
    )
    worker.start()
    entries = keys_file_entries(deployment.keys) + [
        {"name": "late", "key_sha256": hashlib.sha256(late.encode()).hexdigest()}
    ]
    write_keys(deployment.folder / "keys.yaml", entries)
    headers = {"Authorization": f"Bearer {late}", "Connection": "close"}
    deadline = time.monotonic() + 10
    answered = []
    while time.monotonic() < deadline and len(answered) < 6:  # fresh connections: both workers read it
        response = httpx.get(f"{deployment.url}/v1/models", headers=headers)
        answered = answered + [response.status_code] if response.status_code == 200 else []
        time.sleep(0.2)
    assert answered == [200] * 6, "a new key did not work within 10 s of the keys file's change"

    reads = deployment.log.count("keys file read")
    os.kill(deployment.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while deployment.log.count("keys file read") < reads + 2 and time.monotonic() < deadline:
        httpx.get(f"{deployment.url}/v1/models", headers=headers)  # each worker looks when it is used
        time.sleep(0.2)
    assert deployment.log.count("keys file read") >= reads + 2, "SIGHUP did not make both workers read the keys"
    worker.join(timeout=120)
    assert in_flight.get("status") == 200  # the long request beside the reload and the SIGHUP
    assert sorted(child.pid for child in psutil.Process(deployment.pid).children(recursive=True)) == gateway_pids


def test_secrets_are_nowhere_a_client_or_operator_reads(deployment):
    deployment.embed("other")
    httpx.post(
        f"{deployment.url}/v1/embeddings",
        json={"input": "hi"},
        headers={"Authorization": "Bearer " + deployment.keys["other"] + "x"},
    )  # a near miss, in no log
    readable = [
        deployment.log,
        httpx.get(f"{deployment.url}/metrics", headers=deployment.headers("other")).text,
        httpx.get(f"{deployment.url}/v1/models", headers=deployment.headers("other")).text,
        httpx.get(f"{deployment.url}/info", headers=deployment.headers("other")).text,
        deployment.embed("outsider").text,
        deployment.embed("burst").text,
    ]
    for secret in deployment.keys.values():
        assert not any(secret in text for text in readable)


def test_a_wrong_key_takes_as_long_whatever_its_length(deployment):
    """Right-length wrong keys against short and long ones, interleaved on one connection: the medians of their
    401s differ by less than the spread of either (the comparison is of fixed-size digests, every one)."""
    right_length = [new_secret() for _ in range(3)]
    other_lengths = ["x", "emb-short", "emb-" + "y" * 400]
    timings: dict[bool, list[float]] = {True: [], False: []}
    with httpx.Client(base_url=deployment.url) as http:
        for round_ in range(300):
            for same, key in ((True, right_length[round_ % 3]), (False, other_lengths[round_ % 3])):
                started = time.perf_counter()
                response = http.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
                timings[same].append(time.perf_counter() - started)
                assert response.status_code == 401
    same, other = statistics.median(timings[True]), statistics.median(timings[False])
    spread = min(
        statistics.quantiles(timings[True], n=4)[2] - statistics.quantiles(timings[True], n=4)[0],
        statistics.quantiles(timings[False], n=4)[2] - statistics.quantiles(timings[False], n=4)[0],
    )
    assert abs(same - other) < max(spread, 0.1 * min(same, other)), (same, other, spread)


def test_a_world_writable_keys_file_stops_the_server_at_start(tmp_path):
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [{"name": "a", "key_sha256": "0" * 64}]}))
    os.chmod(keys, 0o666)
    config = {"models": [{"model_id": MINILM}], "auth": {"keys_file": str(keys)}}
    (tmp_path / "embento.yaml").write_text(yaml.safe_dump(config))
    env = server_env(tmp_path / "bentoml", EMBENTO_CONFIG=str(tmp_path / "embento.yaml"))
    command = [
        sys.executable,
        "-m",
        "bentoml",
        "serve",
        "service:Gateway",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
    ]
    with background(command, env, tmp_path / "server.log", cwd=ROOT) as process:
        assert process.wait(timeout=180) != 0
    assert "world-writable" in (tmp_path / "server.log").read_text()
