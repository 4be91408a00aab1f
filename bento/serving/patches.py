"""Where BentoML 1.4.40 spends per call on things that buy nothing here, and the changes that stop it.

Each is measured, small, and scoped to what it names; nothing else of BentoML's behaviour changes.

- The adaptive-batching dispatcher holds requests for an idle model (`make_work_conserving`).
- OpenTelemetry's ASGI middleware wraps every request of every service, even with the SDK disabled:
  83 µs per request per hop here (`skip_untraced_middleware`).
- A model service's response asks pydantic for its output's JSON schema to pick a media type, on every
  call: 165 µs for `list[np.ndarray]` (`fix_media_types`).
- A model service's answer lists each output array's size in one header, which BentoML's client reads with
  aiohttp's 8,190-byte limit: an answer of ~1,600 vectors was a 400 (`read_long_buffer_lists`).
- On SIGTERM every service stops listening at once, while the gateway still holds requests it will send
  (`drain_before_shutdown`).
- On SIGHUP circus restarts every worker, the models reloaded and the requests in flight dropped; here it means
  "read the keys file again" (`reload_keys_on_hangup`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from bentoml._internal.marshal.dispatcher import Optimizer

from server_state.server_files import RELOAD_MARK, gateway_workers_alive


def make_work_conserving() -> None:
    """`CorkDispatcher` holds a request while `n * (wait_n + a) <= 0.95 * mean_wait`, where `mean_wait` is
    how long past batches sat queued. Under load that mean is time spent behind the running batch, so after
    a burst a lone request is held about that long, and the holds keep the mean up: measured on
    all-MiniLM-L6-v2, sequential p50 went from 16 ms to 40 ms after a load burst and stayed there. A model
    queue gains nothing by waiting while the model is idle (requests arriving during a pass form the next
    batch anyway, as in TEI), so the mean wait is pinned to zero. Everything else stays BentoML's: the
    latency model, the deadline (503), one batch in flight, `max_batch_size`."""
    if getattr(Optimizer, "_work_conserving", False):
        return
    refresh = Optimizer.trigger_refresh

    def trigger_refresh(self: Optimizer) -> None:
        refresh(self)
        self.wait = 0

    # BentoML's classes patched in place, on purpose: mypy refuses assigning to a method or a new attribute.
    Optimizer.trigger_refresh = trigger_refresh  # type: ignore[method-assign]
    Optimizer._work_conserving = True  # type: ignore[attr-defined]


class _Untraced:
    """Stands in for OpenTelemetry's ASGI middleware when nothing is traced: passes requests straight on."""

    def __init__(self, app: Any, **_: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def patch_serving(tracing: bool) -> None:
    """What every process of a server needs, applied as service.py is imported."""
    if not tracing:
        # With no exporter, BentoML's OpenTelemetry spans still cost CPU (/livez: 1117 req/s with them, 1870
        # without) and memory (a plain BentoML service grew by ~440 MB under 200 connections before levelling
        # off). Off unless tracing is asked for.
        os.environ.setdefault("OTEL_SDK_DISABLED", "true")
        skip_untraced_middleware()
    read_long_buffer_lists()
    reload_keys_on_hangup()


def reload_keys_on_hangup() -> None:
    """In the arbiter, SIGHUP touches the server file the gateway workers watch with the keys file
    (gateway/tenants/keys.py), instead of circus's graceful restart of every worker."""
    from circus.sighandler import SysHandler

    from server_state.server_files import arbiter_file

    def touch_reload_mark(self: SysHandler) -> None:
        arbiter_file(RELOAD_MARK).write_text(str(time.time_ns()))

    SysHandler.handle_hup = touch_reload_mark


def skip_untraced_middleware() -> None:
    """Only without tracing: BentoML imports the middleware class when it builds each service's app."""
    import opentelemetry.instrumentation.asgi as otel_asgi

    # The class replaced in its module, on purpose: mypy refuses assigning to a class name.
    otel_asgi.OpenTelemetryMiddleware = _Untraced  # type: ignore[misc,assignment]


def fix_media_types(service: Any) -> None:
    """Work out each API's response media type once, as BentoML would on every response."""
    for api in service.apis.values():
        if api.output_spec.media_type is None:
            api.output_spec.media_type = api.output_spec.mime_type()


MAX_HEADER_BYTES = 2**20  # a `buffer-lengths` header for 100,000 output arrays


def read_long_buffer_lists() -> None:
    """BentoML pickles a model service's answer with each numpy array as an out-of-band buffer, and lists
    their sizes in the `buffer-lengths` header: ~5 bytes per array. aiohttp, which its client uses, refuses
    a header over 8,190 bytes, so any call answering more than ~1,600 rows failed (one request of 2,048
    inputs, the client batch limit, did). The client's sessions read headers up to `MAX_HEADER_BYTES`."""
    from _bentoml_impl.client.proxy2 import SessionManager

    if getattr(SessionManager, "_reads_long_headers", False):
        return
    make_client = SessionManager._make_client

    def make_client_reading_long_headers(self: SessionManager) -> Any:
        session = make_client(self)
        assert hasattr(session, "_max_field_size") and hasattr(session, "_max_line_size"), "aiohttp changed"
        session._max_field_size = session._max_line_size = MAX_HEADER_BYTES
        return session

    SessionManager._make_client = make_client_reading_long_headers
    SessionManager._reads_long_headers = True


DRAIN_QUIET_S = 0.5  # with no sight of the gateway, a model service stops once it has had no work this long
DRAIN_MAX_S = 20.0
_IDLE_CLOCKS: list[Callable[[], float]] = []  # every model pool of this process


def drain_before_shutdown(idle_seconds: Callable[[], float]) -> None:
    """For a model service's process. Circus stops every service of the server together, and uvicorn stops
    listening at once; but the gateway, draining its own in-flight requests, still has some to send (the
    coalescer holds them while a call runs). So a model service keeps serving while a gateway worker of its
    server runs (`server_state.server_files.gateway_workers_alive`); started alone, until it has been idle for
    `DRAIN_QUIET_S`. Idle time alone was not enough: on a loaded host a draining gateway once took longer than
    that between two calls, and its last request got a 503. At most `DRAIN_MAX_S`, then it shuts down as
    uvicorn does."""
    import uvicorn

    _IDLE_CLOCKS.append(idle_seconds)
    if len(_IDLE_CLOCKS) > 1:
        return
    shutdown = uvicorn.Server.shutdown

    def still_needed() -> bool:
        gateway_alive = gateway_workers_alive()
        if gateway_alive is None:
            return min(idle() for idle in _IDLE_CLOCKS) < DRAIN_QUIET_S
        return gateway_alive

    async def drain_then_shutdown(self: uvicorn.Server, sockets: Any = None) -> None:
        give_up = time.monotonic() + DRAIN_MAX_S
        while still_needed() and time.monotonic() < give_up:
            await asyncio.sleep(0.05)
        await shutdown(self, sockets=sockets)

    # uvicorn's method patched in place, on purpose: mypy refuses assigning to a method.
    uvicorn.Server.shutdown = drain_then_shutdown  # type: ignore[method-assign]
