"""OpenAI's Files and Batches requests on the wire: the body of POST /v1/batches, and the largest body an upload to
/v1/files may have. The routes are gateway/http/job_routes.py; the file and batch objects they answer with,
gateway/jobs/objects.py."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from config.settings import JobSettings

FILES_PATH = "/v1/files"
MULTIPART_OVERHEAD_BYTES = 64 * 1024  # an upload's body beyond its file: boundaries, headers, `purpose`


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
