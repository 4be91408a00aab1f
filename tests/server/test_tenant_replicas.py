"""Two replicas counting one key's limits in one real redis-server (`limits.redis_url`): together they let through
what the key's rate allows, within 5 %; and when Redis dies, the replica that fails open answers while the one that
fails closed refuses, until Redis is back."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml

from config.keys_file import new_secret
from testkit.redis_server import RedisServer, running_redis
from tests.conftest import MINILM, free_port, metric, running_servers

pytestmark = pytest.mark.server

RATE = 120  # requests a minute: 2 a second refill


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, str, str, str]]:
    folder = tmp_path_factory.mktemp("replicas")
    secret = new_secret()
    keys = folder / "keys.yaml"
    keys.write_text(
        yaml.safe_dump(
            {
                "keys": [
                    {
                        "name": "shared",
                        "requests_per_minute": RATE,
                        "key_sha256": hashlib.sha256(secret.encode()).hexdigest(),
                    }
                ]
            }
        )
    )
    os.chmod(keys, 0o600)
    with running_redis(tmp_path_factory.mktemp("redis"), free_port()) as redis_server:

        def config(on_error: str) -> dict:
            return {
                "models": [{"model_id": MINILM}],
                "auth": {"keys_file": str(keys)},
                "limits": {"redis_url": redis_server.url, "on_store_error": on_error},
            }

        servers = [(tmp_path_factory.mktemp(on_error), config(on_error)) for on_error in ("open", "closed")]
        with running_servers(*servers) as [(fails_open, _), (fails_closed, _)]:
            yield redis_server, fails_open, fails_closed, secret


def test_two_replicas_share_a_keys_limit(replicas):
    _, first, second, secret = replicas
    headers = {"Authorization": f"Bearer {secret}"}
    admitted = {first: 0, second: 0}
    refused_in_a_row = 0
    started = time.monotonic()
    with httpx.Client(timeout=60, headers=headers) as http:
        while refused_in_a_row < 20:  # past the burst, and then some
            for url in (first, second):
                response = http.post(f"{url}/v1/embeddings", json={"input": "hi", "model": MINILM})
                assert response.status_code in (200, 429), response.text
                admitted[url] += response.status_code == 200
                refused_in_a_row = refused_in_a_row + 1 if response.status_code == 429 else 0
    allowed = RATE + (time.monotonic() - started) * RATE / 60  # the burst, and what refilled meanwhile
    total = sum(admitted.values())
    assert RATE <= total <= allowed * 1.05, (admitted, allowed)
    assert min(admitted.values()) > RATE / 4, admitted  # both replicas took from the one bucket


def test_a_dead_redis_fails_open_or_closed_as_configured(replicas):
    redis_server, fails_open, fails_closed, secret = replicas
    headers = {"Authorization": f"Bearer {secret}"}
    redis_server.kill()
    try:
        body = {"input": "hi", "model": MINILM}
        answered = httpx.post(f"{fails_open}/v1/embeddings", json=body, headers=headers, timeout=60)
        assert answered.status_code == 200 and "x-ratelimit-remaining-requests" not in answered.headers
        refused = httpx.post(f"{fails_closed}/v1/embeddings", json=body, headers=headers, timeout=60)
        assert refused.status_code == 503 and "limits" in refused.json()["error"]["message"]
        for url in (fails_open, fails_closed):
            assert metric(httpx.get(f"{url}/metrics", headers=headers).text, "embento_limit_store_errors_total") >= 1
    finally:
        redis_server.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # Redis is tried again a second after it failed; the bucket refills
        back = httpx.post(f"{fails_closed}/v1/embeddings", json=body, headers=headers, timeout=60)
        if back.status_code == 200:
            break
        time.sleep(0.5)
    assert back.status_code == 200 and "x-ratelimit-remaining-requests" in back.headers
