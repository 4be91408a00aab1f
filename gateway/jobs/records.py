"""What the job store answers, typed: a file's and a batch's row (as `gateway/jobs/schema.py` declares their
columns), a batch's step due, and a chunk of lines claimed by a worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from gateway.jobs.lines import BatchLine


class FileRecord(TypedDict):
    """An uploaded file, or a batch's output or error file (`batch_id` and `succeeded` set)."""

    id: str
    purpose: str
    filename: str
    bytes: int
    created_at: int
    created_us: int
    expires_at: int
    batch_id: str | None
    succeeded: bool | None
    tenant: str | None  # None in stores from before tenants: default's
    lines: int | None  # an upload's lines


class BatchRecord(TypedDict):
    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    metadata: dict[str, str] | None
    status: str
    tenant: str | None
    errors: list[dict[str, Any]] | None  # validation problems: [{code, message, param, line}]
    total: int
    completed: int
    failed: int
    output_file_id: str | None
    error_file_id: str | None
    created_us: int
    created_at: int
    in_progress_at: int | None
    expires_at: int
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    lease_owner: str | None
    lease_until: float | None


class Step(TypedDict):
    """A batch with a step due, leased to the worker that claimed it."""

    id: str
    status: str
    expires_at: int


@dataclass(frozen=True)
class Chunk:
    """Lines of one batch claimed by a worker."""

    batch_id: str
    endpoint: str
    first_line: int
    lines: list[BatchLine]
    tenant: str  # whose batch it is
