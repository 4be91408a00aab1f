"""Checks at the edge, before a request reaches a route or its body is read: concurrency, media type, body size.
(Who calls, and within which limits, is the tenant gate's: gateway/tenants/gate.py.)"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from config import errors
from gateway.error_responses import error_response
from gateway.metrics import REJECTED
from gateway.shared_memory import SharedCounters

IN_FLIGHT = "requests"  # the shared counter of POST requests being answered, every gateway worker's


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        max_request_bytes: int,
        max_concurrent_requests: int = 2**31,
        counters: SharedCounters | None = None,
        upload_paths: Mapping[str, int] | None = None,
    ) -> None:
        """`upload_paths`: paths that take multipart uploads instead of JSON, each with its own body limit."""
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.upload_paths = upload_paths or {}
        self.max_concurrent_requests = max_concurrent_requests
        self.counters = counters or SharedCounters([IN_FLIGHT])  # POST requests being answered, server-wide

    @property
    def in_flight(self) -> int:
        return self.counters.total(IN_FLIGHT)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        problem = self._check(scope, headers)
        if problem is not None:
            return await error_response(problem)(scope, receive, send)
        if scope["method"] != "POST":
            return await self.app(scope, receive, send)
        if (problem := self._enter()) is not None:
            return await error_response(problem)(scope, receive, send)
        try:
            if "content-length" not in headers:
                receive, problem = await self._buffer_body(receive, self._limit(scope))
            if problem is not None:
                return await error_response(problem)(scope, receive, send)
            await self.app(scope, receive, send)
        finally:
            with self.counters.locked():
                self.counters.add(IN_FLIGHT, -1)

    def _enter(self) -> errors.EmbentoError | None:
        """Count the request in, or refuse it before its body is read or parsed, so a flood of requests
        costs little to turn away."""
        with self.counters.locked():
            in_flight = self.in_flight
            if in_flight < self.max_concurrent_requests:
                self.counters.add(IN_FLIGHT, 1)
                return None
        REJECTED.labels(model_service="gateway", reason="concurrency").inc()
        return errors.Overloaded(f"{in_flight} requests are in flight, the most this server takes; retry shortly")

    def _check(self, scope: Scope, headers: dict[str, str]) -> errors.EmbentoError | None:
        if scope["method"] != "POST":
            return None
        media_type = headers.get("content-type", "application/json").split(";")[0].strip().lower()
        expected = "multipart/form-data" if scope["path"] in self.upload_paths else "application/json"
        if media_type != expected:
            return errors.UnsupportedMediaType(f"Content-Type must be {expected}, not '{media_type}'", param=None)
        length, limit = headers.get("content-length"), self._limit(scope)
        if length is not None and (not length.isdigit() or int(length) > limit):
            return self._too_large(limit)
        return None

    def _limit(self, scope: Scope) -> int:
        return self.upload_paths.get(scope["path"], self.max_request_bytes)

    @staticmethod
    def _too_large(limit: int) -> errors.RequestTooLarge:
        return errors.RequestTooLarge(f"request body is larger than the limit of {limit} bytes")

    async def _buffer_body(self, receive: Receive, limit: int) -> tuple[Receive, errors.EmbentoError | None]:
        """A chunked body has no length to check up front: read it, up to the limit, and replay it."""
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > limit:
                return receive, self._too_large(limit)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        return replay, None
