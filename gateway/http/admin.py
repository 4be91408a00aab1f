"""The admin API: list, load and unload the models a server may serve, add and remove models not in its
configuration, and point aliases, behind the admin key.

Each route is one line onto the admin operations (gateway/served/admin.py, gateway/served/additions.py). The
tenant gate lets `/admin/` through untouched (gateway/tenants/gate.py); here the admin key alone opens it: no key or
a wrong one is a 401, a tenant's key a 403, and with no admin key configured every call is a 403. Each refused call
(those, and the operations' own refusals) is one WARNING line naming who asked: `admin`, a tenant by its name,
`no key` or `an unknown key`, never a key. The routes are Starlette's (BentoML's are POST-only and listed as the
gateway's), so `with_admin_routes` adds them to `/docs.json` under their own tag and security scheme.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from config import errors
from config.settings import EmbentoConfig
from gateway.error_responses import error_response
from gateway.served.additions import Additions
from gateway.served.admin import ModelAdmin
from gateway.tenants.gate import ADMIN_PREFIX, bearer_token
from gateway.tenants.keys import Keys, caller_id
from gateway.validation.admin import json_body, model_field

Handler = Callable[[Request], Awaitable[Any]]
ADMIN_TAG = "Admin"
logger = logging.getLogger(__name__)


def admin_routes(config: EmbentoConfig, admin: ModelAdmin, additions: Additions, keys: Keys) -> list[Route]:
    """The admin routes to mount on the gateway's ASGI app, onto the served models' admin operations."""

    def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def answer(request: Request) -> Response:
            who = _who(bearer_token(request.scope), keys)
            try:
                _check_admin(who, config.admin_key is not None)
                return JSONResponse(await handler(request))
            except errors.EmbentoError as exc:
                response = error_response(exc)
                _log_refused(request, who, response.status_code, exc.message)
                return response

        return answer

    async def list_models(request: Request) -> dict[str, Any]:
        return admin.report()

    async def add(request: Request) -> dict[str, Any]:
        return await additions.add(await _json_body(request))

    async def remove(request: Request) -> dict[str, Any]:
        return await additions.remove(request.path_params["name"])

    async def load(request: Request) -> dict[str, Any]:
        return await admin.load(request.path_params["name"])

    async def unload(request: Request) -> dict[str, Any]:
        return await admin.unload(request.path_params["name"])

    async def point_alias(request: Request) -> dict[str, Any]:
        return await admin.point_alias(request.path_params["alias"], await _model_field(request))

    async def remove_alias(request: Request) -> dict[str, Any]:
        return admin.remove_alias(request.path_params["alias"])

    return [
        Route(f"{ADMIN_PREFIX}models", guarded(list_models), methods=["GET"]),
        Route(f"{ADMIN_PREFIX}models", guarded(add), methods=["POST"]),
        Route(f"{ADMIN_PREFIX}models/{{name:path}}/load", guarded(load), methods=["POST"]),
        Route(f"{ADMIN_PREFIX}models/{{name:path}}/unload", guarded(unload), methods=["POST"]),
        Route(f"{ADMIN_PREFIX}models/{{name:path}}", guarded(remove), methods=["DELETE"]),
        Route(f"{ADMIN_PREFIX}aliases/{{alias:path}}", guarded(point_alias), methods=["PUT"]),
        Route(f"{ADMIN_PREFIX}aliases/{{alias:path}}", guarded(remove_alias), methods=["DELETE"]),
    ]


NO_KEY, UNKNOWN_KEY = "no key", "an unknown key"


def _who(token: str | None, keys: Keys) -> str:
    """Who calls, as the log names them: `admin`, a tenant, `no key` or `an unknown key` (never the key)."""
    if keys.is_admin(token):
        return "admin"
    if not token:
        return NO_KEY
    tenant = keys.current().tenant(token)
    return caller_id(tenant) if tenant is not None else UNKNOWN_KEY


def _check_admin(who: str, admin_api_on: bool) -> None:
    if not admin_api_on:
        raise errors.Forbidden("the admin API is off: set `admin_key` to use it")
    if who == "admin":
        return
    if who not in (NO_KEY, UNKNOWN_KEY):
        raise errors.Forbidden("a tenant's key cannot use the admin API; send the admin key")
    raise errors.Unauthorized("missing or invalid admin key; send 'Authorization: Bearer <admin key>'")


def _log_refused(request: Request, who: str, status: int, message: str) -> None:
    """One line per refused admin call. The path as sent, still percent-encoded, and the message on one line:
    nothing a caller sends can start a line of its own."""
    path = request.scope.get("raw_path") or request.url.path.encode()
    flat = message.replace("\r", "\\r").replace("\n", "\\n")
    logger.warning(
        "admin: %s %s refused, asked by %s: %d %s", request.method, path.decode("latin-1"), who, status, flat
    )


async def _json_body(request: Request) -> object:
    return json_body(await request.body())


async def _model_field(request: Request) -> str:
    return model_field(await _json_body(request))


ERROR = {"$ref": "#/components/schemas/AdminError"}
NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
ALIAS = {"name": "alias", "in": "path", "required": True, "schema": {"type": "string"}}
ANSWERS = {
    "200": {"description": "Done", "content": {"application/json": {"schema": {"type": "object"}}}},
    **{
        status: {"description": meaning, "content": {"application/json": {"schema": ERROR}}}
        for status, meaning in (
            ("401", "No admin key, or a wrong one"),
            ("403", "A tenant's key, or the admin API is off"),
            ("400", "A body that is not what the route takes (a model entry's field refused, named)"),
            ("404", "No such model or alias"),
            (
                "409",
                "Not possible in this state (an alias onto a model not loaded; a name taken; a kind no model service "
                "of this server runs; a configured model removed; a split topology)",
            ),
            ("503", "The load failed or was refused (the reason is in the message), or is still under way"),
        )
    },
}


# A model entry, as `models:` in embento.yaml takes it (docs/configuration.md lists every field).
MODEL_ENTRY = {
    "type": "object",
    "required": ["model_id"],
    "properties": {"model_id": {"type": "string"}, "served_model_name": {"type": "string"}},
    "additionalProperties": True,
}


def _operation(summary: str, parameters: list[dict], body: bool = False) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "tags": [ADMIN_TAG],
        "summary": summary,
        "security": [{"adminKey": []}],
        "parameters": parameters,
        "responses": ANSWERS,
    }
    if body:
        model = {"type": "object", "required": ["model"], "properties": {"model": {"type": "string"}}}
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": model}}}
    return operation


ADMIN_PATHS = {
    f"{ADMIN_PREFIX}models": {
        "get": _operation("Every model the server may serve, with its state", []),
        "post": {
            **_operation("Add a model not in the configuration; answers once it is warm", []),
            "requestBody": {"required": True, "content": {"application/json": {"schema": MODEL_ENTRY}}},
        },
    },
    f"{ADMIN_PREFIX}models/{{name}}": {"delete": _operation("Remove a model added at run time", [NAME])},
    f"{ADMIN_PREFIX}models/{{name}}/load": {"post": _operation("Load a model; answers once it is warm", [NAME])},
    f"{ADMIN_PREFIX}models/{{name}}/unload": {"post": _operation("Unload a model everywhere", [NAME])},
    f"{ADMIN_PREFIX}aliases/{{alias}}": {
        "put": _operation("Point an alias at a loaded model", [ALIAS], body=True),
        "delete": _operation("Remove an alias", [ALIAS]),
    },
}


def with_admin_routes(schema: dict[str, Any]) -> dict[str, Any]:
    """`/docs.json` with the admin routes added, apart: their own tag and the `adminKey` security scheme
    (`gateway.http.openapi` applies it)."""
    schema.setdefault("paths", {}).update(ADMIN_PATHS)
    tags = schema.setdefault("tags", [])
    tags.append({"name": ADMIN_TAG, "description": "Models loaded, unloaded and aliased at run time: the admin key."})
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})["adminKey"] = {"type": "http", "scheme": "bearer"}
    components.setdefault("schemas", {})["AdminError"] = {
        "type": "object",
        "properties": {"error": {"type": "object"}},
    }
    return schema
