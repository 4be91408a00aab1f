"""Errors on the wire: the one mapping from the error hierarchy to HTTP, in OpenAI's shape.

`{"error": {"message", "type", "param", "code"}}` for every failure: ours, BentoML's (validation,
overload, timeout) and Starlette's (404, 405) alike.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from models import errors

logger = logging.getLogger(__name__)

# (status, code) per error class; the most specific class wins (checked in MRO order).
STATUS: dict[type[errors.EmbentoError], tuple[int, str | None]] = {
    errors.UnsupportedMediaType: (415, "unsupported_media_type"),
    errors.InvalidRequest: (400, None),
    errors.RequestTooLarge: (413, "request_too_large"),
    errors.UnknownModel: (404, "model_not_found"),
    errors.RouteNotFound: (404, "not_found"),
    errors.Unauthorized: (401, "invalid_api_key"),
    errors.Overloaded: (429, "overloaded"),
    errors.NotReady: (503, "model_not_ready"),
    errors.ModelUnavailable: (503, "model_unavailable"),
    errors.RequestTimeout: (504, "timeout"),
    errors.ClientGone: (499, "client_closed_request"),  # nginx's status; only logs and metrics see it
    errors.EmbentoError: (500, "internal_error"),
}


# Overloaded (429) and not ready (503) are worth retrying; clients that honour Retry-After wait this long.
RETRY_AFTER_S = "1"
RETRY_STATUSES = (429, 503)


def error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def error_response(exc: errors.EmbentoError) -> JSONResponse:
    status, code = next(STATUS[cls] for cls in type(exc).__mro__ if cls in STATUS)
    if status >= 500:
        logger.error("%s: %s", type(exc).__name__, exc.message)
    headers = {"Retry-After": RETRY_AFTER_S} if status in RETRY_STATUSES else None
    return JSONResponse(error_body(status, exc.message, exc.param, code), status_code=status, headers=headers)


def _is_openai_error(body: bytes) -> bool:
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("error"), dict) and "message" in parsed["error"]


def _describe_framework_error(status: int, body: bytes) -> tuple[str, str | None]:
    """A readable message (and the offending field) from a BentoML or Starlette error body."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        parsed = body.decode("utf-8", "replace").strip()
    if isinstance(parsed, list) and parsed:  # BentoML wraps 4xx exception bodies in a list
        parsed = parsed[0]
    if isinstance(parsed, dict) and isinstance(parsed.get("detail"), list) and parsed["detail"]:
        first = parsed["detail"][0]
        location = [str(part) for part in first.get("loc", ()) if part not in ("body", "root")]
        message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
        if first.get("type") == "json_invalid":
            return "the request body is not valid JSON", None
        return (f"{'.'.join(location)}: {message}" if location else message), (location[0] if location else None)
    if isinstance(parsed, dict) and "error" in parsed:
        parsed = parsed["error"]
    defaults = {404: "no such route", 405: "method not allowed on this route", 429: "too many requests",
                503: "the model service is overloaded; retry later", 504: "the request timed out"}
    if status >= 500 and status not in defaults:
        return "internal server error; see the server log", None
    return str(parsed or defaults.get(status, "request failed")), None


class OpenAIErrorBodies:
    """Rewrites every error response that is not already OpenAI-shaped, keeping its status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
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
            await self._send_error(start, b"".join(chunks), send)

        await self.app(scope, receive, capture)

    @staticmethod
    async def _send_error(start: Message, body: bytes, send: Send) -> None:
        status = start["status"]
        if not _is_openai_error(body):
            message, param = _describe_framework_error(status, body)
            body = json.dumps(error_body(status, message, param)).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"content-type")]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status in RETRY_STATUSES and not any(k.lower() == b"retry-after" for k, _ in headers):
            headers.append((b"retry-after", RETRY_AFTER_S.encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
