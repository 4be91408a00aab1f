"""A request's say over the cache, by HTTP's `Cache-Control` request directives: `no-cache` (or `max-age=0`)
computes and then stores (a refresh), `no-store` computes and stores nothing; both leave the lookup out."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send


@dataclass(frozen=True)
class CachePolicy:
    read: bool = True
    write: bool = True


DEFAULT_POLICY = CachePolicy()
REQUEST_POLICY: ContextVar[CachePolicy] = ContextVar("embento_cache_policy", default=DEFAULT_POLICY)


def policy_of(header: str) -> CachePolicy:
    """`max-age=0` asks, as `no-cache` does, for nothing stored however fresh."""
    directives = dict(_directive(part) for part in header.split(","))
    stale = directives.get("max-age", "").isdigit() and int(directives["max-age"]) == 0
    return CachePolicy(
        read=not (directives.keys() & {"no-cache", "no-store"} or stale), write="no-store" not in directives
    )


def _directive(text: str) -> tuple[str, str]:
    name, _, value = text.partition("=")
    return name.strip().lower(), value.strip().strip('"')


class CacheControl:
    """Reads a POST request's `Cache-Control` into `REQUEST_POLICY` for the engine."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        header = b",".join(value for name, value in scope["headers"] if name == b"cache-control")
        token = REQUEST_POLICY.set(policy_of(header.decode("latin-1")) if header else DEFAULT_POLICY)
        try:
            await self.app(scope, receive, send)
        finally:
            REQUEST_POLICY.reset(token)
