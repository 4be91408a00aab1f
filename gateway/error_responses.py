"""The error vocabulary: the one mapping from the error hierarchy (config/errors.py) to HTTP, and the error bodies
in each client family's shape.

OpenAI's `{"error": {"message", "type", "param", "code"}}` on the OpenAI, Cohere and infinity routes; TEI's
`{"error": "...", "error_type": "Validation"}` on TEI's routes; Voyage's `{"detail": "..."}` on Voyage's (its SDK
reads `detail`); the status is the same in each, and the statuses worth retrying carry `Retry-After`.
Below `wire/`, `jobs/` and `tenants/`, which all answer with it; `gateway/http/errors.py` (`ErrorBodies`) puts
every error response, ours and the framework's, into its path's shape.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Mapping
from typing import Any, Literal

from starlette.responses import JSONResponse

from config import errors

logger = logging.getLogger(__name__)
ErrorShape = Literal["openai", "tei", "voyage"]

# (status, code) per error class; the most specific class wins (checked in MRO order).
STATUS: dict[type[errors.EmbentoError], tuple[int, str | None]] = {
    errors.UnsupportedMediaType: (415, "unsupported_media_type"),
    errors.InvalidRequest: (400, None),
    errors.RequestTooLarge: (413, "request_too_large"),
    errors.UnknownModel: (404, "model_not_found"),
    errors.RouteNotFound: (404, "not_found"),
    errors.NotFound: (404, None),
    errors.Unauthorized: (401, "invalid_api_key"),
    errors.Forbidden: (403, "forbidden"),
    errors.Conflict: (409, "conflict"),
    errors.Overloaded: (429, "overloaded"),
    errors.RateLimited: (429, "rate_limit_exceeded"),
    errors.NotReady: (503, "model_not_ready"),
    errors.ModelUnavailable: (503, "model_unavailable"),
    errors.RequestTimeout: (504, "timeout"),
    errors.ClientGone: (499, "client_closed_request"),  # nginx's status; only logs and metrics see it
    errors.EmbentoError: (500, "internal_error"),
}


# Overloaded (429) and not ready (503) are worth retrying; clients that honour Retry-After wait this long.
RETRY_AFTER_S = "1"
RETRY_STATUSES = (429, 503)
INTERNAL_ERROR_MESSAGE = "internal server error; see the server log"  # a bug's 500: its details stay in the log
# BentoML reads an empty body as `{}`, which would be refused for its first missing field.
EMPTY_BODY_MESSAGE = "the request body is empty; send a JSON object with the route's fields"


def error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def tei_error_type(status: int) -> str:
    """TEI's `error_type` for a status (TEI writes them capitalized)."""
    return {401: "Unauthorized", 429: "Overloaded", 503: "Unhealthy"}.get(
        status, "Backend" if status >= 500 else "Validation"
    )


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None, shape: ErrorShape = "openai"
) -> dict[str, Any]:
    if shape == "tei":
        return {"error": message, "error_type": tei_error_type(status)}
    if shape == "voyage":
        return {"detail": message}
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def error_response(exc: errors.EmbentoError, shape: ErrorShape = "openai") -> JSONResponse:
    status, code = next(STATUS[cls] for cls in type(exc).__mro__ if cls in STATUS)
    if status >= 500:
        logger.error("%s: %s", type(exc).__name__, exc.message)
    headers = {"Retry-After": RETRY_AFTER_S} if status in RETRY_STATUSES else None
    return JSONResponse(error_body(status, exc.message, exc.param, code, shape), status_code=status, headers=headers)


def describe_validation(first: Mapping[str, Any], body_head: bytes = b"") -> tuple[str, str | None]:
    """A body's first validation error (pydantic's `errors()` entry) as a message, and the offending field;
    `body_head`: the body's first bytes, which tell a byte order mark."""
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "root")]
    message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if first.get("type") == "json_invalid":
        return _invalid_json(message.removeprefix("Invalid JSON: "), body_head), None
    return (f"{'.'.join(location)}: {message}" if location else message), (location[0] if location else None)


def _invalid_json(reason: str, body_head: bytes) -> str:
    """What is wrong with a body that is not JSON, from the parser's reason (a problem and where: never the body's
    text) in words that name the usual causes."""
    if body_head.startswith(codecs.BOM_UTF8):
        return "the request body starts with a UTF-8 byte order mark (EF BB BF); send the JSON without it"
    where = reason[reason.index(" at line ") + 1 :] if " at line " in reason else "in the body"
    if "surrogate" in reason or "end of hex escape" in reason:  # the parser's words for half of a \u pair
        return (
            f"the request body is not valid JSON: a \\u escape {where} is a lone surrogate (\\ud800-\\udfff "
            "come in pairs, a high one then a low one, to write one character)"
        )
    if "invalid unicode code point" in reason:
        return f"the request body is not valid UTF-8 ({where}); send the JSON encoded as UTF-8"
    return f"the request body is not valid JSON: {reason}"
