"""OpenAI's Files and Batches APIs, field for field, onto the job store (gateway/jobs/): the official SDK's
`files.*` and `batches.*` calls work unchanged. Refusals are 400s (404s for unknown ids) in OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from config import errors
from config.settings import JobSettings
from gateway.answering import answering
from gateway.error_responses import describe_validation
from gateway.jobs.answers import ENDPOINTS
from gateway.jobs.records import BatchRecord, FileRecord
from gateway.jobs.store import BATCH_WINDOW_S, JobStore
from gateway.tenants.keys import TENANT

FILES_PATH = "/v1/files"
MULTIPART_OVERHEAD_BYTES = 64 * 1024  # an upload's body beyond its file: boundaries, headers, `purpose`
Handler = Callable[[Request], Awaitable[Response]]


class BatchCreate(BaseModel):
    """POST /v1/batches."""

    model_config = ConfigDict(extra="ignore")

    input_file_id: StrictStr
    endpoint: StrictStr
    completion_window: StrictStr
    metadata: dict[str, StrictStr] | None = Field(None, max_length=16)


def upload_limit(settings: JobSettings) -> int:
    """The largest body POST /v1/files takes: a file of `max_file_bytes` and its multipart framing."""
    return settings.max_file_bytes + MULTIPART_OVERHEAD_BYTES


def file_object(record: FileRecord) -> dict[str, Any]:
    return {
        "id": record["id"],
        "object": "file",
        "bytes": record["bytes"],
        "created_at": record["created_at"],
        "expires_at": record["expires_at"],
        "filename": record["filename"],
        "purpose": record["purpose"],
        "status": "processed",
        "status_details": None,
    }


def batch_object(record: BatchRecord) -> dict[str, Any]:
    problems = record["errors"]
    return {
        "id": record["id"],
        "object": "batch",
        "endpoint": record["endpoint"],
        "errors": {"object": "list", "data": problems} if problems else None,
        "input_file_id": record["input_file_id"],
        "completion_window": record["completion_window"],
        "status": record["status"],
        "output_file_id": record["output_file_id"],
        "error_file_id": record["error_file_id"],
        **{
            name: record[name]
            for name in (
                "created_at",
                "in_progress_at",
                "expires_at",
                "finalizing_at",
                "completed_at",
                "failed_at",
                "expired_at",
                "cancelling_at",
                "cancelled_at",
            )
        },
        "request_counts": {"total": record["total"], "completed": record["completed"], "failed": record["failed"]},
        "metadata": record["metadata"],
    }


def listing(objects: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """OpenAI's cursor page: one object more than `limit` was read, to tell `has_more`."""
    page = objects[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(objects) > limit,
    }


def job_routes(store: JobStore, settings: JobSettings, created: Callable[[], None]) -> list[Route]:
    """The routes to mount on the gateway's ASGI app; `created` hears of each batch created."""

    async def upload(request: Request) -> Response:
        try:
            form = await request.form()
        except Exception as exc:  # a malformed multipart body
            raise errors.InvalidRequest(f"the upload is not a valid multipart form: {exc}") from None
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose != "batch":
            raise errors.InvalidRequest(
                f"purpose '{purpose}' is not served; upload batch input files with purpose 'batch'", param="purpose"
            )
        if not isinstance(upload, UploadFile):
            raise errors.InvalidRequest("the form needs a `file` part holding the file", param="file")
        content = await upload.read()
        if len(content) > settings.max_file_bytes:
            raise errors.InvalidRequest(
                f"the file is {len(content)} bytes; at most {settings.max_file_bytes} are "
                "allowed (jobs.max_file_bytes)",
                param="file",
            )
        record = await asyncio.to_thread(
            store.add_file, upload.filename or "upload.jsonl", purpose, content, TENANT.get()
        )
        return JSONResponse(file_object(record))

    async def list_files(request: Request) -> Response:
        limit = _limit(request, default=10000, most=10000)
        order = request.query_params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise errors.InvalidRequest("order must be 'asc' or 'desc'", param="order")
        records = await asyncio.to_thread(
            store.files,
            request.query_params.get("purpose"),
            request.query_params.get("after"),
            limit + 1,
            order == "desc",
            TENANT.get(),
        )
        return JSONResponse(listing([file_object(record) for record in records], limit))

    async def get_file(request: Request) -> Response:
        return JSONResponse(file_object(await _file(request)))

    async def delete_file(request: Request) -> Response:
        file_id = request.path_params["file_id"]
        if not await asyncio.to_thread(store.delete_file, file_id, TENANT.get()):
            raise _no_file(file_id)
        return JSONResponse({"id": file_id, "object": "file", "deleted": True})

    async def file_content(request: Request) -> Response:
        record = await _file(request)
        pieces: Iterator[bytes] = store.content(record)  # read in a thread, piece by piece
        return StreamingResponse(
            pieces, media_type="application/octet-stream", headers={"Content-Length": str(record["bytes"])}
        )

    async def _file(request: Request) -> FileRecord:
        file_id = request.path_params["file_id"]
        record = await asyncio.to_thread(store.file, file_id, TENANT.get())
        if record is None:
            raise _no_file(file_id)
        return record

    async def create_batch(request: Request) -> Response:
        try:
            body = BatchCreate.model_validate_json(await request.body())
        except ValidationError as exc:
            message, param = describe_validation(exc.errors()[0])
            raise errors.InvalidRequest(message, param=param) from None
        if body.endpoint not in ENDPOINTS:
            raise errors.InvalidRequest(
                f"endpoint '{body.endpoint}' is not served; one of {sorted(ENDPOINTS)}", param="endpoint"
            )
        if body.completion_window not in BATCH_WINDOW_S:
            raise errors.InvalidRequest(
                f"completion_window must be one of {sorted(BATCH_WINDOW_S)}", param="completion_window"
            )
        record = await asyncio.to_thread(
            store.create_batch, body.endpoint, body.input_file_id, body.completion_window, body.metadata, TENANT.get()
        )
        created()
        return JSONResponse(batch_object(record))

    async def list_batches(request: Request) -> Response:
        limit = _limit(request, default=20, most=100)
        records = await asyncio.to_thread(store.batches, request.query_params.get("after"), limit + 1, TENANT.get())
        return JSONResponse(listing([batch_object(record) for record in records], limit))

    async def get_batch(request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        record = await asyncio.to_thread(store.batch, batch_id, TENANT.get())
        return JSONResponse(batch_object(_found(record, batch_id)))

    async def cancel_batch(request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        record = await asyncio.to_thread(store.cancel, batch_id, TENANT.get())
        return JSONResponse(batch_object(_found(record, batch_id)))

    return [
        Route(FILES_PATH, _answering(upload), methods=["POST"]),
        Route(FILES_PATH, _answering(list_files), methods=["GET"]),
        Route(FILES_PATH + "/{file_id}", _answering(get_file), methods=["GET"]),
        Route(FILES_PATH + "/{file_id}", _answering(delete_file), methods=["DELETE"]),
        Route(FILES_PATH + "/{file_id}/content", _answering(file_content), methods=["GET"]),
        Route("/v1/batches", _answering(create_batch), methods=["POST"]),
        Route("/v1/batches", _answering(list_batches), methods=["GET"]),
        Route("/v1/batches/{batch_id}", _answering(get_batch), methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", _answering(cancel_batch), methods=["POST"]),
    ]


def _answering(handler: Handler) -> Handler:
    """The handler through the routes' one way to answer (`gateway.answering.answering`): its refusals in
    OpenAI's shape. Not in the request metrics, which count model requests."""

    async def answer(request: Request) -> Response:
        return await answering(lambda: handler(request), recorded=False)

    return answer


def _limit(request: Request, default: int, most: int) -> int:
    raw = request.query_params.get("limit", str(default))
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise errors.InvalidRequest(f"limit must be an integer from 1 to {most}", param="limit")
    return int(raw)


def _no_file(file_id: str) -> errors.NotFound:
    return errors.NotFound(f"no file '{file_id}' (unknown, expired or deleted)", param="file_id")


def _found(record: BatchRecord | None, batch_id: str) -> BatchRecord:
    if record is None:
        raise errors.NotFound(f"no batch '{batch_id}'", param="batch_id")
    return record
