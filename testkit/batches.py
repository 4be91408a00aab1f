"""Bulk jobs through the OpenAI SDK: batch input lines, a batch submitted, waited for and its output read. For
tests/server/test_batches.py, the replica-loss test (tests/server/test_replica_loss.py)."""

from __future__ import annotations

import json
import time
from typing import Any

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
FINISHED = ("completed", "failed", "cancelled", "expired")
WAIT_S = 240


def jsonl(lines: list[dict]) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()


def request_line(custom_id: str, body: dict, url: str = "/v1/embeddings") -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def embedding_lines(count: int, prefix: str = "line", model: str = MINILM) -> list[dict]:
    return [
        request_line(f"{prefix}-{i}", {"model": model, "input": [f"{prefix} sentence {i}", f"and {i * 7}"]})
        for i in range(count)
    ]


def submitted(client: Any, lines: list[dict], endpoint: str = "/v1/embeddings") -> Any:
    """The batch of `lines`, created through `client` (an OpenAI SDK client)."""
    upload = client.files.create(file=("input.jsonl", jsonl(lines)), purpose="batch")
    return client.batches.create(input_file_id=upload.id, endpoint=endpoint, completion_window="24h")


def finished(client: Any, batch_id: str, timeout_s: float = WAIT_S) -> Any:
    """The batch once its status is final."""
    deadline = time.monotonic() + timeout_s
    while (batch := client.batches.retrieve(batch_id)).status not in FINISHED:
        assert time.monotonic() < deadline, batch
        time.sleep(0.2)
    return batch


def output_lines(client: Any, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]
