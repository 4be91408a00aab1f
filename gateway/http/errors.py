"""Every error response in its path's shape: `ErrorBodies`, the outermost error middleware, and the table of
which path answers in which shape.

The error shape is a property of the path, declared once here: TEI's client libraries read TEI's
`{"error", "error_type"}` on TEI's paths (and on `/rerank` when the body is TEI's), Voyage's SDK `{"detail"}` on
Voyage's, every other client OpenAI's. The routes answer in OpenAI's (`gateway/answering.py`, with the bodies and
statuses of `gateway/error_responses.py`); `ErrorBodies` rewrites it on the paths below, as it does the
framework's own errors (BentoML's validation, overload and timeout, Starlette's 404 and 405), so every failure
leaves in its route's shape.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.error_responses import (
    EMPTY_BODY_MESSAGE,
    INTERNAL_ERROR_MESSAGE,
    RETRY_AFTER_S,
    RETRY_STATUSES,
    ErrorShape,
    describe_validation,
    error_body,
)
from gateway.wire import shared_rerank, tei, voyage

# Every other path: "openai".
ERROR_SHAPES: dict[str, ErrorShape] = {
    **{path: "tei" for path in tei.TEI_PATHS},
    **{path: "voyage" for path in voyage.VOYAGE_PATHS},
}
# Paths both families share: TEI's shape when the JSON body is TEI's by the rule.
TEI_BODIES: Mapping[str, Callable[[Mapping[str, Any]], bool]] = {"/rerank": shared_rerank.is_tei_rerank}


def _shape_of(body: bytes) -> tuple[ErrorShape | None, str | None]:
    """Which of the shapes an error body has, and its message."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(parsed, dict):
        return None, None
    error = parsed.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return "openai", error["message"]
    if isinstance(error, str) and isinstance(parsed.get("error_type"), str):
        return "tei", error
    if set(parsed) == {"detail"} and isinstance(parsed["detail"], str):
        return "voyage", parsed["detail"]
    return None, None


def _json_is(body: bytes, rule: Callable[[Mapping[str, Any]], bool]) -> bool:
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    return isinstance(parsed, dict) and rule(parsed)


def _describe_framework_error(status: int, body: bytes, body_head: bytes = b"") -> tuple[str, str | None]:
    """A readable message (and the offending field) from a BentoML or Starlette error body."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        parsed = body.decode("utf-8", "replace").strip()
    if isinstance(parsed, list) and parsed:  # BentoML wraps 4xx exception bodies in a list
        parsed = parsed[0]
    if isinstance(parsed, dict) and isinstance(parsed.get("detail"), list) and parsed["detail"]:
        return describe_validation(parsed["detail"][0], body_head)
    if isinstance(parsed, dict) and "error" in parsed:
        parsed = parsed["error"]
    defaults = {
        404: "no such route",
        405: "method not allowed on this route",
        429: "too many requests",
        503: "the model service is overloaded; retry later",
        504: "the request timed out",
    }
    if status >= 500 and status not in defaults:
        return INTERNAL_ERROR_MESSAGE, None
    return str(parsed or defaults.get(status, "request failed")), None


class RequestBody:
    """What an error's answer needs of the request body, noted as the route reads it: its first bytes (a byte
    order mark), whether it was empty, and where the shape follows the body, all of it."""

    HEAD_BYTES = len(codecs.BOM_UTF8)

    def __init__(self, receive: Receive, keep: bool) -> None:
        self._receive = receive
        self.head = b""
        self.size = 0
        self.complete = False  # the route read all of it
        self._chunks: list[bytes] | None = [] if keep else None

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            self.head += chunk[: self.HEAD_BYTES - len(self.head)]
            self.size += len(chunk)
            self.complete = not message.get("more_body", False)
            if self._chunks is not None:
                self._chunks.append(chunk)
        return message

    @property
    def empty(self) -> bool:
        return self.complete and self.size == 0

    def whole(self) -> bytes:
        return b"".join(self._chunks or ())


class ErrorBodies:
    """Rewrites every error response into its route's shape, keeping its status: the shape `shapes` gives its
    path, and on `tei_bodies` paths TEI's when the request's JSON body is TEI's by that path's rule; else
    OpenAI's. An OpenAI-shaped body (ours) takes the route's shape; one already in another shape stays. A 400 to
    an empty body says so, whatever the route made of the `{}` BentoML reads it as."""

    def __init__(
        self,
        app: ASGIApp,
        shapes: Mapping[str, ErrorShape] | None = None,
        tei_bodies: Mapping[str, Callable[[Mapping[str, Any]], bool]] | None = None,
    ) -> None:
        self.app = app
        self.shapes = shapes or {}
        self.tei_bodies = tei_bodies or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] != "POST":  # GET / is BentoML's docs page, not TEI's
            return await self._rewrite(scope, receive, send, lambda: "openai", None)
        is_tei = self.tei_bodies.get(scope["path"])
        body = RequestBody(receive, keep=is_tei is not None)  # the body is read anyway; little is kept

        def shape() -> ErrorShape:
            if is_tei is None:
                return self.shapes.get(scope["path"], "openai")
            return "tei" if _json_is(body.whole(), is_tei) else "openai"

        await self._rewrite(scope, body.receive, send, shape, body)

    async def _rewrite(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        shape: Callable[[], ErrorShape],
        request: RequestBody | None,
    ) -> None:
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                if message["status"] < 400:
                    start = None
                    return await send(message)
                start = message
                return None
            if start is None:
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return None
            await self._send_error(start, b"".join(chunks), send, shape(), request)

        await self.app(scope, receive, capture)

    @staticmethod
    async def _send_error(
        start: Message, body: bytes, send: Send, shape: ErrorShape, request: RequestBody | None
    ) -> None:
        status = start["status"]
        found, message = _shape_of(body)
        if status == 400 and request is not None and request.empty:
            body = json.dumps(error_body(status, EMPTY_BODY_MESSAGE, shape=shape)).encode()
        elif found is None:
            message, param = _describe_framework_error(status, body, request.head if request else b"")
            body = json.dumps(error_body(status, message, param, shape=shape)).encode()
        elif found == "openai" and shape != "openai":  # ours, and the guard's (401, 413, 429)
            body = json.dumps(error_body(status, message or "", shape=shape)).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"content-type")]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status in RETRY_STATUSES and not any(k.lower() == b"retry-after" for k, _ in headers):
            headers.append((b"retry-after", RETRY_AFTER_S.encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
