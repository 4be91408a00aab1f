"""Errors on the wire: the one mapping from the error hierarchy to HTTP, in the shape of the route's client.

OpenAI's `{"error": {"message", "type", "param", "code"}}` on the OpenAI, Cohere and infinity routes; TEI's
`{"error": "...", "error_type": "Validation"}` on TEI's routes; Voyage's `{"detail": "..."}` on Voyage's (its SDK
reads `detail`); the status is the same in each. Every
failure leaves in one of them: ours, BentoML's (validation, overload, timeout) and Starlette's (404, 405).
"""

from __future__ import annotations

import codecs
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from config import errors

logger = logging.getLogger(__name__)
ErrorShape = Literal["openai", "tei", "voyage"]

# (status, code) per error class; the most specific class wins (checked in MRO order).
STATUS: dict[type[errors.EmbentoError], tuple[int, str | None]] = {
    errors.UnsupportedMediaType: (415, "unsupported_media_type"),
    errors.InvalidRequest: (400, None),
    errors.RequestTooLarge: (413, "request_too_large"),
    errors.UnknownModel: (404, "model_not_found"),
    errors.RouteNotFound: (404, "not_found"),
    errors.NotFound: (404, None),
    errors.Unauthorized: (401, "invalid_api_key"),
    errors.Forbidden: (403, "forbidden"),
    errors.Conflict: (409, "conflict"),
    errors.Overloaded: (429, "overloaded"),
    errors.RateLimited: (429, "rate_limit_exceeded"),
    errors.NotReady: (503, "model_not_ready"),
    errors.ModelUnavailable: (503, "model_unavailable"),
    errors.RequestTimeout: (504, "timeout"),
    errors.ClientGone: (499, "client_closed_request"),  # nginx's status; only logs and metrics see it
    errors.EmbentoError: (500, "internal_error"),
}


# Overloaded (429) and not ready (503) are worth retrying; clients that honour Retry-After wait this long.
RETRY_AFTER_S = "1"
RETRY_STATUSES = (429, 503)
INTERNAL_ERROR_MESSAGE = "internal server error; see the server log"  # a bug's 500: its details stay in the log
# BentoML reads an empty body as `{}`, which would be refused for its first missing field.
EMPTY_BODY_MESSAGE = "the request body is empty; send a JSON object with the route's fields"


def error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def tei_error_type(status: int) -> str:
    """TEI's `error_type` for a status (TEI writes them capitalized)."""
    return {401: "Unauthorized", 429: "Overloaded", 503: "Unhealthy"}.get(
        status, "Backend" if status >= 500 else "Validation"
    )


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None, shape: ErrorShape = "openai"
) -> dict[str, Any]:
    if shape == "tei":
        return {"error": message, "error_type": tei_error_type(status)}
    if shape == "voyage":
        return {"detail": message}
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def error_response(exc: errors.EmbentoError, shape: ErrorShape = "openai") -> JSONResponse:
    status, code = next(STATUS[cls] for cls in type(exc).__mro__ if cls in STATUS)
    if status >= 500:
        logger.error("%s: %s", type(exc).__name__, exc.message)
    headers = {"Retry-After": RETRY_AFTER_S} if status in RETRY_STATUSES else None
    return JSONResponse(error_body(status, exc.message, exc.param, code, shape), status_code=status, headers=headers)


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


def describe_validation(first: Mapping[str, Any], body_head: bytes = b"") -> tuple[str, str | None]:
    """A body's first validation error (pydantic's `errors()` entry) as a message, and the offending field;
    `body_head`: the body's first bytes, which tell a byte order mark."""
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "root")]
    message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if first.get("type") == "json_invalid":
        return _invalid_json(message.removeprefix("Invalid JSON: "), body_head), None
    return (f"{'.'.join(location)}: {message}" if location else message), (location[0] if location else None)


def _invalid_json(reason: str, body_head: bytes) -> str:
    """What is wrong with a body that is not JSON, from the parser's reason (a problem and where: never the body's
    text) in words that name the usual causes."""
    if body_head.startswith(codecs.BOM_UTF8):
        return "the request body starts with a UTF-8 byte order mark (EF BB BF); send the JSON without it"
    where = reason[reason.index(" at line ") + 1 :] if " at line " in reason else "in the body"
    if "surrogate" in reason or "end of hex escape" in reason:  # the parser's words for half of a \u pair
        return (
            f"the request body is not valid JSON: a \\u escape {where} is a lone surrogate (\\ud800-\\udfff "
            "come in pairs, a high one then a low one, to write one character)"
        )
    if "invalid unicode code point" in reason:
        return f"the request body is not valid UTF-8 ({where}); send the JSON encoded as UTF-8"
    return f"the request body is not valid JSON: {reason}"


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
