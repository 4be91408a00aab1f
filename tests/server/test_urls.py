"""URL inputs on a server that allows them (`url_client`, tests/conftest.py): fetched from an allowed address, and
refused (400) for loopback, metadata and private addresses, names that resolve to them, redirects to them, slow
servers and oversize bodies. The fixture HTTP server (tests/file_server.py) listens on 127.0.0.2, the one network
this server allows."""

from __future__ import annotations

import time

import httpx
import pytest

from testkit.media import data_uri
from tests.asserts import assert_openai_error
from tests.conftest import TINY_CLIP
from tests.file_server import PNG, TIMEOUT_S
from tests.tolerance import assert_same_vectors

pytestmark = pytest.mark.server


def _embed(client: httpx.Client, item: str) -> httpx.Response:
    return client.post("/v1/embeddings", json={"model": TINY_CLIP, "modality": "image", "input": [item]})


def test_an_allowed_url_embeds_like_the_same_bytes(url_client, files):
    fetched = _embed(url_client, f"{files}/ok.png")
    assert fetched.status_code == 200, fetched.text
    inline = _embed(url_client, data_uri(PNG, "image/png")).json()
    assert_same_vectors(fetched.json()["data"][0]["embedding"], inline["data"][0]["embedding"])
    assert _embed(url_client, f"{files}/redirect-ok").status_code == 200


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("http://127.0.0.1:9/x.png", "non-public"),
        ("http://169.254.169.254/latest/meta-data/", "non-public"),
        ("http://localhost:9/x.png", "non-public"),
        ("http://[::1]:9/x.png", "non-public"),
        ("ftp://127.0.0.2/x.png", "data URI"),
        ("{files}/redirect-loopback", "non-public"),
        ("{files}/redirect-metadata", "non-public"),
        ("{files}/slow", "timed out"),
        ("{files}/big", "at most 300000"),
        ("{files}/big-chunked", "larger than 300000"),
        ("{files}/missing.png", "HTTP 404"),
    ],
)
def test_refused_urls(url_client, files, path, fragment):
    started = time.monotonic()
    error = assert_openai_error(_embed(url_client, path.format(files=files)), 400, "input")
    assert fragment in error["message"], error
    assert time.monotonic() - started < TIMEOUT_S + 5
    assert _embed(url_client, data_uri(PNG, "image/png")).status_code == 200
