"""Every route's one way to answer: the adapter's answer, or its error as a response (`gateway/error_responses.py`,
in OpenAI's shape; `ErrorBodies` in gateway/http/errors.py gives it the path's), at the caller's priority with
the tenant's share, traced in the metrics. Below `wire/`, `jobs/` and `http/`: the model routes
(service.py), a bulk job's lines (gateway/jobs/answers.py) and the file and batch routes
(gateway/http/job_routes.py) all answer through it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar, cast

from starlette.responses import Response

from config import errors
from gateway.error_responses import error_response
from gateway.metrics import TRACE, RequestTrace
from gateway.queue.priority import PRIORITY
from gateway.tenants.keys import TENANT

if TYPE_CHECKING:
    from gateway.engine import Engine

B = TypeVar("B")
T = TypeVar("T")


async def answered(adapter: Callable[[Engine, B], Awaitable[T | Response]], engine: Engine, body: B) -> T:
    """`adapter(engine, body)`, called here so that an adapter's refusal of its own body is answered like any
    other error; at the body's `priority` level, within the class of the caller (an online request's, or a
    bulk job's), with the tenant's share.

    The answer, or the error, may be a starlette `Response` (written here or by the adapter), which BentoML
    sends as it is: it is typed as `T` all the same, since a route's return annotation is BentoML's schema of
    its success."""
    level = getattr(body, "priority", 0) or 0

    async def call() -> T | Response:
        with engine.served.holding():  # the models it names stay loaded until it is answered
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
