"""BentoML settings shared by every model service."""

from __future__ import annotations

import logging
import os
import signal

from bentoml._internal.context import server_context

from models.base import Kind
from models.config import ModelConfig
from models.kinds import model_kind
from runners.store import served_config

logger = logging.getLogger(__name__)

# BentoML 1.4.30+ recycles the inter-service connection pool every 100 requests / 300 s while requests
# are still in flight, which surfaces as 500s under concurrency (bentoml #5540, #5698). Never recycle.
MODEL_SERVICE_CONFIG = {
    "workers": 1,
    "traffic": {"timeout": 600},
    "runner_connection": {"max_requests": 10**9, "max_age": 1e9},
    "logging": {"access": {"enabled": False}},
}
# The dispatcher cancels queued work it predicts will miss this deadline (a 503). The gateway owns
# request deadlines, so the dispatcher's is only a backstop.
DISPATCH_MAX_LATENCY_MS = 300_000


def dispatch_max_rows() -> int:
    """Rows one runner call may gather: enough for several passes of the largest model batch."""
    return max(64, 4 * max(m.batch_size for m in served_config().models))


def models_of_kind(*kinds: Kind) -> list[ModelConfig]:
    """The configured models a runner serves."""
    return [m for m in served_config().models if model_kind(m) in kinds]


def stop_server(reason: str) -> None:
    """Stop the whole server: for a model that cannot load, which would fail the same way on every one of
    the restarts BentoML would otherwise make, forever, behind a 503. Stopped, the failure is seen, and an
    orchestrator restarts the server with its own back-off."""
    logger.error("%s; stopping the server", reason)
    if server_context.worker_index is not None:  # a worker process under BentoML's arbiter, our parent
        os.kill(os.getppid(), signal.SIGTERM)
