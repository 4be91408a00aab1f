"""The GET routes (BentoML's own API routes are POST-only): the model list, infinity's /health, TEI's /info,
and /readyz with a body. Each asks the running Gateway (`bentoml.get_current_service()`) what it knows."""

from __future__ import annotations

from collections.abc import Mapping

import bentoml
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import error_response
from models import errors
from models.base import Kind
from models.config import EmbentoConfig

# Request limits a client may want to know before it sends: GET /info, as TEI's.
LIMIT_FIELDS = ("max_client_batch_size", "max_item_chars", "max_request_tokens", "max_request_bytes",
                "request_timeout_s", "max_concurrent_requests", "max_queued_items", "max_queued_tokens",
                "max_media_items", "max_item_bytes", "max_image_pixels", "max_audio_seconds", "allow_url_inputs",
                "url_timeout_s")


class ReadinessReport:
    """GET /readyz with a body: which models serve and which failed to load. BentoML's own /readyz says only
    200 or 503, and its route comes before any mounted one, so this answers it first."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/readyz" or scope["method"] not in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        report = await bentoml.get_current_service().readiness()
        await JSONResponse(report, status_code=200 if report["ready"] else 503)(scope, receive, send)


async def _get_models(request: Request) -> Response:
    try:
        return JSONResponse((await bentoml.get_current_service().model_list()).model_dump())
    except errors.EmbentoError as exc:
        return error_response(exc)


async def _get_health(request: Request) -> Response:
    try:
        return JSONResponse(await bentoml.get_current_service().health())
    except errors.EmbentoError as exc:
        return error_response(exc)


def get_routes(config: EmbentoConfig, kinds: Mapping[str, Kind]) -> list[Route]:
    """The GET routes to mount; /info answers from the configuration it is given."""
    async def get_info(request: Request) -> Response:
        models = [{"id": m.served_model_name, "kind": kinds[m.served_model_name], "batch_size": m.batch_size,
                   "max_batch_tokens": m.max_batch_tokens} for m in config.models]
        return JSONResponse({"models": models, "limits": {name: getattr(config, name) for name in LIMIT_FIELDS}})

    return [*(Route(path, _get_models, methods=["GET"]) for path in ("/v1/models", "/models")),
            Route("/health", _get_health, methods=["GET"]), Route("/info", get_info, methods=["GET"])]
