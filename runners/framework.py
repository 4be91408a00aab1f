"""Where BentoML 1.4.40 spends per call on things that buy nothing here, and the changes that stop it.

Each is measured, small, and scoped to what it names; nothing else of BentoML's behaviour changes.

- The adaptive-batching dispatcher holds requests for an idle model (`make_work_conserving`).
- OpenTelemetry's ASGI middleware wraps every request of every service, even with the SDK disabled:
  83 µs per request per hop here (`skip_untraced_middleware`).
- A model service's response asks pydantic for its output's JSON schema to pick a media type, on every
  call: 165 µs for `list[np.ndarray]` (`fix_media_types`).
"""

from __future__ import annotations

from typing import Any

from bentoml._internal.marshal.dispatcher import Optimizer


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

    Optimizer.trigger_refresh = trigger_refresh  # type: ignore[method-assign]
    Optimizer._work_conserving = True  # type: ignore[attr-defined]


class _Untraced:
    """Stands in for OpenTelemetry's ASGI middleware when nothing is traced: passes requests straight on."""

    def __init__(self, app: Any, **_: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def skip_untraced_middleware() -> None:
    """Only without tracing: BentoML imports the middleware class when it builds each service's app."""
    import opentelemetry.instrumentation.asgi as otel_asgi

    otel_asgi.OpenTelemetryMiddleware = _Untraced  # type: ignore[misc,assignment]


def fix_media_types(service: Any) -> None:
    """Work out each API's response media type once, as BentoML would on every response."""
    for api in service.apis.values():
        if api.output_spec.media_type is None:
            api.output_spec.media_type = api.output_spec.mime_type()
