"""URL inputs on a server that allows them: fetched from an allowed address, and refused (400) for
loopback, metadata and private addresses, names that resolve to them, redirects to them, slow servers and
oversize bodies. The fixture HTTP server listens on 127.0.0.2, the one network this server allows."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from testkit.media import IMAGES, data_uri, image_bytes
from tests.asserts import assert_openai_error
from tests.conftest import TINY_CLIP, running_server
from tests.tolerance import assert_same_vectors

pytestmark = pytest.mark.server
MAX_ITEM_BYTES = 300_000
TIMEOUT_S = 2.0
PNG = IMAGES["png"][0]
BIG = image_bytes(600, 600, fmt="BMP")  # > MAX_ITEM_BYTES


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        routes = {
            "/ok.png": lambda: self._send(PNG),
            "/redirect-ok": lambda: self._redirect("/ok.png"),
            "/redirect-loopback": lambda: self._redirect(f"http://127.0.0.1:{self.server.server_port}/ok.png"),
            "/redirect-metadata": lambda: self._redirect("http://169.254.169.254/latest/meta-data/"),
            "/slow": self._slow,
            "/big": lambda: self._send(BIG),
            "/big-chunked": lambda: self._send(BIG, chunked=True),
        }
        routes.get(self.path, lambda: self.send_error(404))()

    def _send(self, body: bytes, chunked: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(body), 65536):
                part = body[start : start + 65536]
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _slow(self) -> None:
        time.sleep(TIMEOUT_S * 3)
        self._send(PNG)


@pytest.fixture(scope="module")
def files() -> Iterator[str]:
    Handler.protocol_version = "HTTP/1.1"
    httpd = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.2:{httpd.server_port}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def url_client(tmp_path_factory, tiny_clip_path) -> Iterator[httpx.Client]:
    config = {
        "models": [{"model_id": str(tiny_clip_path), "served_model_name": TINY_CLIP}],
        "allow_url_inputs": True,
        "url_allow_networks": ["127.0.0.2/32"],
        "url_timeout_s": TIMEOUT_S,
        "max_item_bytes": MAX_ITEM_BYTES,
    }
    with running_server(tmp_path_factory.mktemp("url-server"), config) as (url, _):
        with httpx.Client(base_url=url, timeout=60) as http:
            yield http


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
