"""Checks of the Files and Batches requests (`gateway/http/job_routes.py`): an upload's form and size, POST
/v1/batches's body, a list's `limit` and `order`. A batch's lines are checked later, each as its route's request
(`gateway.jobs.answers`); what a file or batch would add to the stored bytes and queued lines is counted by the
store, in the transaction that stores it (`gateway/jobs/store.py`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import NoReturn, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.datastructures import UploadFile

from config.errors import InvalidRequest
from gateway.error_responses import describe_validation

M = TypeVar("M", bound=BaseModel)


def refuse_form(read: Exception) -> NoReturn:
    """An upload's body that is no multipart form (`read`: what reading it raised)."""
    raise InvalidRequest(f"the upload is not a valid multipart form: {read}") from None


def upload_parts(purpose: object, upload: object) -> tuple[str, UploadFile]:
    """The form's `purpose` (batch, the one served) and its `file` part."""
    if purpose != "batch":
        raise InvalidRequest(
            f"purpose '{purpose}' is not served; upload batch input files with purpose 'batch'", param="purpose"
        )
    if not isinstance(upload, UploadFile):
        raise InvalidRequest("the form needs a `file` part holding the file", param="file")
    return purpose, upload


def check_file_size(size: int, most: int) -> None:
    """An uploaded file within `jobs.max_file_bytes`."""
    if size > most:
        raise InvalidRequest(
            f"the file is {size} bytes; at most {most} are allowed (jobs.max_file_bytes)",
            param="file",
        )


def batch_body(model: type[M], body: bytes) -> M:
    """POST /v1/batches's body, parsed; its first validation error as a 400 naming the field."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        message, param = describe_validation(exc.errors()[0])
        raise InvalidRequest(message, param=param) from None


def check_batch_target(
    endpoint: str, completion_window: str, endpoints: Collection[str], windows: Collection[str]
) -> None:
    """An endpoint a batch may target, and a completion window served."""
    if endpoint not in endpoints:
        raise InvalidRequest(f"endpoint '{endpoint}' is not served; one of {sorted(endpoints)}", param="endpoint")
    if completion_window not in windows:
        raise InvalidRequest(f"completion_window must be one of {sorted(windows)}", param="completion_window")


def list_limit(raw: str, most: int) -> int:
    """A list's `limit` query parameter: an integer from 1 to `most`."""
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise InvalidRequest(f"limit must be an integer from 1 to {most}", param="limit")
    return int(raw)


def check_order(order: str) -> None:
    """A list's `order` query parameter."""
    if order not in ("asc", "desc"):
        raise InvalidRequest("order must be 'asc' or 'desc'", param="order")
