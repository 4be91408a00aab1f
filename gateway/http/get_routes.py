"""The GET routes (BentoML's own API routes are POST-only): the model list, infinity's /health, /info (the
limits, and TEI's fields), and /readyz with a body. Each answers from the gateway's `Lifecycle`."""

from __future__ import annotations

import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from config import errors
from config.settings import EmbentoConfig, ModelConfig
from gateway.error_responses import error_response
from gateway.served.models import ServedModels
from gateway.served.registry import ModelRegistry
from gateway.startup.lifecycle import Lifecycle
from gateway.tenants.keys import TENANT
from gateway.wire.openai import model_list
from gateway.wire.tei import tei_model_type
from models.base import ModelInfo

try:
    VERSION = version("embento")
except PackageNotFoundError:  # a Bento carries the sources, not the installed package
    VERSION = "unknown"
STARTED = int(time.time())  # each model's `created` in the model list
# Request limits a client may want to know before it sends: GET /info, as TEI's.
LIMIT_FIELDS = (
    "max_client_batch_size",
    "max_item_chars",
    "max_request_tokens",
    "max_request_bytes",
    "max_response_bytes",
    "request_timeout_s",
    "max_concurrent_requests",
    "max_queued_items",
    "max_queued_tokens",
    "max_media_items",
    "max_item_bytes",
    "max_image_pixels",
    "max_audio_seconds",
    "allow_url_inputs",
    "url_timeout_s",
)


class ReadinessReport:
    """GET /readyz with a body: which models serve and which failed to load. BentoML's own /readyz says only
    200 or 503, and its route comes before any mounted one, so this answers it first."""

    def __init__(self, app: ASGIApp, lifecycle: Lifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/readyz" or scope["method"] not in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        report = await self.lifecycle.readiness()
        await JSONResponse(report, status_code=200 if report["ready"] else 503)(scope, receive, send)


def tei_info(config: EmbentoConfig, default: ModelConfig, info: ModelInfo | None) -> dict[str, Any]:
    """TEI's /info fields, for the default model (the first the caller may use); those only a loaded model knows
    are null before."""
    return {
        "model_id": default.model_id,
        "model_sha": default.revision,
        "model_dtype": info and info.dtype,
        "model_type": info and _tei_model_type(info, default.pooling),
        "served_model_name": default.served_model_name,
        "max_concurrent_requests": config.max_concurrent_requests,
        "max_input_length": info and info.max_input_tokens,
        "max_batch_tokens": info and info.max_batch_tokens,
        "max_batch_requests": info and info.batch_size,
        "max_client_batch_size": config.max_client_batch_size,
        "auto_truncate": True,
        "tokenization_workers": None,
        "version": VERSION,
        "sha": None,
        "docker_label": None,
    }


def _tei_model_type(info: ModelInfo, pooling: str | None) -> dict[str, Any]:
    model_type = tei_model_type(info.spec)
    if model_type == "embedding":
        return {"embedding": {"pooling": "splade" if info.sparse else pooling}}
    labels = info.labels or ["LABEL_0"]
    return {model_type: {"id2label": dict(enumerate(labels)), "label2id": {label: i for i, label in enumerate(labels)}}}


def _model_limits(model: ModelConfig, registry: ModelRegistry) -> dict[str, Any]:
    """A model's pass limits in force once it is loaded (sized for its device unless configured), and where it
    runs; before, what is configured (null: sized for the device)."""
    info = registry.infos.get(model.served_model_name)
    if info is None:
        return {
            "id": model.served_model_name,
            "kind": registry.kinds[model.served_model_name],
            "device": None,
            "batch_size": model.batch_size,
            "max_batch_tokens": model.max_batch_tokens,
            "pass_budget_ms": model.pass_budget_ms,
        }
    return {
        "id": info.served_model_name,
        "kind": info.kind,
        "device": info.device,
        "batch_size": info.batch_size,
        "max_batch_tokens": info.max_batch_tokens,
        "pass_budget_ms": info.pass_budget_ms or None,
    }


def get_routes(config: EmbentoConfig, lifecycle: Lifecycle, served: ServedModels) -> list[Route]:
    """The GET routes to mount; /info answers from the models' settings and, once loaded, their facts."""
    registry = served.registry

    async def get_models(request: Request) -> Response:
        try:
            # A model its service holds but this worker has not warmed up yet is still loading, as seen from here.
            states = {
                name: "loading" if state == "loaded" and name not in registry.infos else state
                for name, state in served.states.names().items()
            }
            answer = model_list(registry, STARTED, states, served.wanted.read().aliases)
            return JSONResponse(answer.model_dump())
        except errors.EmbentoError as exc:
            return error_response(exc)

    async def get_health(request: Request) -> Response:
        try:
            return JSONResponse(await lifecycle.health())
        except errors.EmbentoError as exc:
            return error_response(exc)

    async def get_info(request: Request) -> Response:
        usable = [model for model in served.wanted.entries() if TENANT.get().may_use(model.served_model_name)]
        default = usable[0] if usable else ModelConfig(model_id="", served_model_name="")
        return JSONResponse(
            {
                "models": [_model_limits(model, registry) for model in usable],
                "limits": {name: getattr(config, name) for name in LIMIT_FIELDS},
                **tei_info(config, default, registry.infos.get(default.served_model_name)),
            }
        )

    return [
        *(Route(path, get_models, methods=["GET"]) for path in ("/v1/models", "/models")),
        Route("/health", get_health, methods=["GET"]),
        Route("/info", get_info, methods=["GET"]),
    ]
