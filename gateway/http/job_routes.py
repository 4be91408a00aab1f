"""OpenAI's Files and Batches routes, onto the job store (gateway/jobs/): Starlette routes that `assembly.install`
mounts beside BentoML's when jobs are on; the official SDK's `files.*` and `batches.*` calls work unchanged. Each
answers for the caller's tenant alone, through the routes' one way to answer (`gateway.answering.answering`):
refusals are 400s (404s for unknown ids) in OpenAI's error shape. Not in the request metrics, which count model
requests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from config import errors
from config.settings import JobSettings
from gateway.answering import answering
from gateway.jobs.answers import ENDPOINTS
from gateway.jobs.objects import batch_object, file_object, listing
from gateway.jobs.records import BatchRecord, FileRecord
from gateway.jobs.store import BATCH_WINDOW_S, JobStore
from gateway.tenants.keys import TENANT
from gateway.validation.jobs import (
    batch_body,
    check_batch_target,
    check_file_size,
    check_order,
    list_limit,
    refuse_form,
    upload_parts,
)
from gateway.wire.batches import FILES_PATH, BatchCreate

BATCHES_PATH = "/v1/batches"
Handler = Callable[[Request], Awaitable[Response]]


def job_routes(store: JobStore, settings: JobSettings, created: Callable[[], None]) -> list[Route]:
    """The routes to mount on the gateway's ASGI app; `created` hears of each batch created."""
    files = FileRoutes(store, settings)
    batches = BatchRoutes(store, created)
    return [
        Route(FILES_PATH, _answering(files.upload), methods=["POST"]),
        Route(FILES_PATH, _answering(files.list_files), methods=["GET"]),
        Route(FILES_PATH + "/{file_id}", _answering(files.get_file), methods=["GET"]),
        Route(FILES_PATH + "/{file_id}", _answering(files.delete_file), methods=["DELETE"]),
        Route(FILES_PATH + "/{file_id}/content", _answering(files.file_content), methods=["GET"]),
        Route(BATCHES_PATH, _answering(batches.create_batch), methods=["POST"]),
        Route(BATCHES_PATH, _answering(batches.list_batches), methods=["GET"]),
        Route(BATCHES_PATH + "/{batch_id}", _answering(batches.get_batch), methods=["GET"]),
        Route(BATCHES_PATH + "/{batch_id}/cancel", _answering(batches.cancel_batch), methods=["POST"]),
    ]


class FileRoutes:
    """/v1/files: upload, list, get, delete, and a file's content."""

    def __init__(self, store: JobStore, settings: JobSettings) -> None:
        self.store = store
        self.settings = settings

    async def upload(self, request: Request) -> Response:
        purpose, upload = await _upload_form(request)
        content = await upload.read()
        check_file_size(len(content), self.settings.max_file_bytes)
        record = await asyncio.to_thread(
            self.store.add_file, upload.filename or "upload.jsonl", purpose, content, TENANT.get()
        )
        return JSONResponse(file_object(record))

    async def list_files(self, request: Request) -> Response:
        limit = _limit(request, default=10000, most=10000)
        order = request.query_params.get("order", "desc")
        check_order(order)
        records = await asyncio.to_thread(
            self.store.files,
            request.query_params.get("purpose"),
            request.query_params.get("after"),
            limit + 1,
            order == "desc",
            TENANT.get(),
        )
        return JSONResponse(listing([file_object(record) for record in records], limit))

    async def get_file(self, request: Request) -> Response:
        return JSONResponse(file_object(await self._file(request)))

    async def delete_file(self, request: Request) -> Response:
        file_id = request.path_params["file_id"]
        if not await asyncio.to_thread(self.store.delete_file, file_id, TENANT.get()):
            raise _no_file(file_id)
        return JSONResponse({"id": file_id, "object": "file", "deleted": True})

    async def file_content(self, request: Request) -> Response:
        record = await self._file(request)
        pieces: Iterator[bytes] = self.store.content(record)  # read in a thread, piece by piece
        return StreamingResponse(
            pieces, media_type="application/octet-stream", headers={"Content-Length": str(record["bytes"])}
        )

    async def _file(self, request: Request) -> FileRecord:
        file_id = request.path_params["file_id"]
        record = await asyncio.to_thread(self.store.file, file_id, TENANT.get())
        if record is None:
            raise _no_file(file_id)
        return record


class BatchRoutes:
    """/v1/batches: create (`created` hears of each), list, get and cancel."""

    def __init__(self, store: JobStore, created: Callable[[], None]) -> None:
        self.store = store
        self.created = created

    async def create_batch(self, request: Request) -> Response:
        body = _batch_create(await request.body())
        record = await asyncio.to_thread(
            self.store.create_batch,
            body.endpoint,
            body.input_file_id,
            body.completion_window,
            body.metadata,
            TENANT.get(),
        )
        self.created()
        return JSONResponse(batch_object(record))

    async def list_batches(self, request: Request) -> Response:
        limit = _limit(request, default=20, most=100)
        records = await asyncio.to_thread(
            self.store.batches, request.query_params.get("after"), limit + 1, TENANT.get()
        )
        return JSONResponse(listing([batch_object(record) for record in records], limit))

    async def get_batch(self, request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        record = await asyncio.to_thread(self.store.batch, batch_id, TENANT.get())
        return JSONResponse(batch_object(_found(record, batch_id)))

    async def cancel_batch(self, request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        record = await asyncio.to_thread(self.store.cancel, batch_id, TENANT.get())
        return JSONResponse(batch_object(_found(record, batch_id)))


def _answering(handler: Handler) -> Handler:
    """The handler through the routes' one way to answer (`gateway.answering.answering`): its refusals in
    OpenAI's shape. Not in the request metrics, which count model requests."""

    async def answer(request: Request) -> Response:
        return await answering(lambda: handler(request), recorded=False)

    return answer


async def _upload_form(request: Request) -> tuple[str, UploadFile]:
    """An upload's `purpose` (batch, the one served) and its `file` part, from its multipart form."""
    try:
        form = await request.form()
    except Exception as exc:  # a malformed multipart body
        refuse_form(exc)
    return upload_parts(form.get("purpose"), form.get("file"))


def _batch_create(body: bytes) -> BatchCreate:
    """POST /v1/batches's body, read and checked: an endpoint a batch may target, a completion window served."""
    create = batch_body(BatchCreate, body)
    check_batch_target(create.endpoint, create.completion_window, ENDPOINTS, BATCH_WINDOW_S)
    return create


def _limit(request: Request, default: int, most: int) -> int:
    return list_limit(request.query_params.get("limit", str(default)), most)


def _no_file(file_id: str) -> errors.NotFound:
    return errors.NotFound(f"no file '{file_id}' (unknown, expired or deleted)", param="file_id")


def _found(record: BatchRecord | None, batch_id: str) -> BatchRecord:
    if record is None:
        raise errors.NotFound(f"no batch '{batch_id}'", param="batch_id")
    return record
