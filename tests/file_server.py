"""A local HTTP file server for URL inputs: an image, redirects to it and to addresses a server must refuse, a slow
answer and oversize bodies. It listens on 127.0.0.2, the one network the URL test server allows
(`tests.conftest.url_clip_server`)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testkit.media import IMAGES, image_bytes

HOST = "127.0.0.2"
MAX_ITEM_BYTES = 300_000  # the URL test server's cap
TIMEOUT_S = 2.0  # the URL test server's url_timeout_s; /slow answers after three times as long
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


@contextlib.contextmanager
def serving_files() -> Iterator[str]:
    """The file server's base URL, until the block ends."""
    Handler.protocol_version = "HTTP/1.1"
    httpd = ThreadingHTTPServer((HOST, 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://{HOST}:{httpd.server_port}"
    finally:
        httpd.shutdown()
