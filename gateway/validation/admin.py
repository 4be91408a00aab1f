"""Checks of the admin API's bodies (`gateway/http/admin.py`): JSON, and the `model` field that an alias is pointed
at. A model entry added at run time is checked as the configuration checks one, by `gateway/served/additions.py`."""

from __future__ import annotations

import json

from config.errors import InvalidRequest


def json_body(raw: bytes) -> object:
    """An admin call's body as JSON (none: an empty object)."""
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        raise InvalidRequest("the request body is not valid JSON") from None


def model_field(body: object) -> str:
    """The body's `model`: a name."""
    model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(model, str) or not model:
        raise InvalidRequest('body must be {"model": "<served model name>"}', param="model")
    return model
