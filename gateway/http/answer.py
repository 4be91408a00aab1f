"""Every POST route's answer: the adapter's, or its error as a response; either way traced in the metrics.

The error shape is a property of the path, declared once here: TEI's client libraries read TEI's
`{"error", "error_type"}` on TEI's paths (and on `/rerank` when the body is TEI's), Voyage's SDK `{"detail"}` on
Voyage's, every other client OpenAI's.
`answered` writes OpenAI's; `ErrorBodies` (the outermost error middleware) rewrites it on the paths below, as it
does the framework's own errors, so both leave in the same shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from starlette.responses import Response

from config import errors
from gateway.http.errors import ErrorShape, error_response
from gateway.metrics import TRACE, RequestTrace
from gateway.queue.priority import PRIORITY
from gateway.tenants.keys import TENANT
from gateway.wire import shared_rerank, tei, voyage

if TYPE_CHECKING:
    from gateway.engine import Engine

B = TypeVar("B")
T = TypeVar("T")

# Every other path: "openai".
ERROR_SHAPES: dict[str, ErrorShape] = {
    **{path: "tei" for path in tei.TEI_PATHS},
    **{path: "voyage" for path in voyage.VOYAGE_PATHS},
}
# Paths both families share: TEI's shape when the JSON body is TEI's by the rule.
TEI_BODIES: Mapping[str, Callable[[Mapping[str, Any]], bool]] = {"/rerank": shared_rerank.is_tei_rerank}


async def answered(adapter: Callable[[Engine, B], Awaitable[T | Response]], engine: Engine, body: B) -> T:
    """`adapter(engine, body)`, called here so that an adapter's refusal of its own body is answered like any
    other error; at the body's `priority` level, within the class of the caller (an online request's, or a
    bulk job's), with the tenant's share.

    The answer, or the error, may be a starlette `Response` (written here or by the adapter), which BentoML
    sends as it is: it is typed as `T` all the same, since a route's return annotation is BentoML's schema of
    its success."""
    level = getattr(body, "priority", 0) or 0

    async def call() -> T | Response:
        with engine.catalog.holding():  # the models it names stay loaded until it is answered
            return await adapter(engine, body)

    return await answering(call, level, recorded=not PRIORITY.get().batch)


async def answering(call: Callable[[], Awaitable[T | Response]], level: int = 0, recorded: bool = True) -> T:
    """Every route's one way to answer (the model routes through `answered`, the file and batch routes directly):
    `call()` traced (in the request metrics if `recorded`), at priority `level` with the tenant's share, and an
    `EmbentoError` as its response."""
    trace = RequestTrace(recorded=recorded)
    token = TRACE.set(trace)
    tenant = TENANT.get()
    asked = replace(
        PRIORITY.get(), level=level, tenant=tenant.name, weight=tenant.weight, interactive=tenant.interactive
    )
    priority = PRIORITY.set(asked)
    try:
        answer = await call()
        trace.finish(200)
        return cast(T, answer)  # a Response stands in for T: BentoML sends it as it is
    except errors.EmbentoError as exc:
        response = error_response(exc)
        trace.finish(response.status_code)
        return cast(T, response)  # likewise
    except Exception:  # a bug: BentoML answers 500
        trace.finish(500)
        raise
    finally:
        PRIORITY.reset(priority)
        TRACE.reset(token)
