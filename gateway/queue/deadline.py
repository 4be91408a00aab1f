"""When a request stops being worth computing: its deadline passed, or its client disconnected.

Either way the gateway stops waiting at once, and the caller (`ModelCalls._abandon` in gateway/queue/model_calls.py)
tells the model service to drop the request's queued rows, so abandoned work does not delay the requests behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from config import errors

T = TypeVar("T")
# Set while a POST request is answered: fires when its client disconnects.
CLIENT_GONE: ContextVar[asyncio.Event | None] = ContextVar("embento_client_gone", default=None)


class WatchDisconnect:
    """Notices a client that disconnects while its request is being answered.

    Once the app has read the whole body, the next `receive()` returns only when the client disconnects
    or the response is complete (ASGI), so a watcher can wait on it without taking the body from the app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        gone, body_read = asyncio.Event(), asyncio.Event()

        async def app_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                body_read.set()
            return message

        async def watch() -> None:
            await body_read.wait()
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        token = CLIENT_GONE.set(gone)
        try:
            await self.app(scope, app_receive, send)
        finally:
            CLIENT_GONE.reset(token)
            watcher.cancel()


async def until_done(work: Awaitable[T], timeout_s: float | None) -> T:
    """`work`'s result, or `RequestTimeout` past `timeout_s` (None: no deadline), or `ClientGone` once the client
    has left; in both cases `work` is cancelled."""
    task = asyncio.ensure_future(work)
    gone = CLIENT_GONE.get()
    waiters = {task} if gone is None else {task, asyncio.ensure_future(gone.wait())}
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        for waiter in waiters - {task}:
            waiter.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task  # its connection is closed before the caller moves on
    if gone is not None and gone.is_set():
        raise errors.ClientGone("the client disconnected")
    raise errors.RequestTimeout(f"the request did not finish within {timeout_s:g} s")
