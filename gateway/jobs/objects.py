"""The job store's records as OpenAI's Files and Batches APIs show them: the file object, the batch object and the
cursor page of a list, field for field, so that the official SDK's `files.*` and `batches.*` read them unchanged."""

from __future__ import annotations

from typing import Any

from gateway.jobs.records import BatchRecord, FileRecord
from gateway.jobs.schema import BATCH_TIMES


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
        **{name: record[name] for name in BATCH_TIMES},
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
