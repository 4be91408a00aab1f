"""A batch line answered as its online route answers it: the same body model and adapter, under the batch
priority class, the answer's JSON bytes as the route writes them, wrapped in OpenAI's output line."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pydantic_core
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from config import errors
from gateway.answering import answered
from gateway.error_responses import INTERNAL_ERROR_MESSAGE, RETRY_STATUSES, STATUS, describe_validation, error_body
from gateway.queue.priority import BATCH, PRIORITY
from gateway.wire import cohere, openai
from gateway.wire.common import RerankRequest

if TYPE_CHECKING:
    from gateway.engine import Engine

logger = logging.getLogger(__name__)
UNAVAILABLE = STATUS[errors.ModelUnavailable][1]
Adapter = Callable[["Engine", Any], Awaitable[Any]]
# The routes a batch may target: OpenAI's, and as extensions Cohere's rerank and embed.
ENDPOINTS: dict[str, tuple[type[BaseModel], Adapter]] = {
    "/v1/embeddings": (openai.EmbeddingRequest, openai.embed),
    "/v1/rerank": (RerankRequest, cohere.rerank_v1),
    "/v2/embed": (cohere.CohereV2EmbedRequest, cohere.embed_v2),
}


@dataclass(frozen=True)
class LineAnswer:
    status: int
    body: bytes  # JSON, as the online route writes it

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        """Overloaded or not ready: worth running again later rather than reporting (a model that failed to load
        is reported at once)."""
        return self.status in RETRY_STATUSES and json.loads(self.body).get("error", {}).get("code") != UNAVAILABLE


async def answer_line(engine: Engine, endpoint: str, body: str) -> LineAnswer:
    """The online route's answer to `body`, computed in the batch class (gateway/queue/priority.py)."""
    request_model, adapter = ENDPOINTS[endpoint]
    try:
        request = request_model.model_validate_json(body)
    except ValidationError as exc:
        message, param = describe_validation(exc.errors()[0])
        return LineAnswer(400, json.dumps(error_body(400, message, param)).encode())
    token = PRIORITY.set(BATCH)
    try:
        answer = await answered(adapter, engine, request)
    except Exception:  # a bug, where the online route answers 500: the line's error, not the batch's
        logger.exception("a batch line failed")
        return LineAnswer(500, json.dumps(error_body(500, INTERNAL_ERROR_MESSAGE)).encode())
    finally:
        PRIORITY.reset(token)
    if isinstance(answer, Response):
        return LineAnswer(answer.status_code, bytes(answer.body))
    return LineAnswer(200, pydantic_core.to_json(answer))  # as BentoML writes a model or a dict


def output_line(custom_id: str, answer: LineAnswer) -> str:
    """OpenAI's output (or error) file line: `{"id", "custom_id", "response": {"status_code", "request_id",
    "body"}, "error"}`, the body spliced in as the route wrote it."""
    head = json.dumps({"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id}, separators=(",", ":"))
    response = f'{{"status_code":{answer.status},"request_id":"{uuid.uuid4().hex}","body":{answer.body.decode()}}}'
    return f'{head[:-1]},"response":{response},"error":null}}'
