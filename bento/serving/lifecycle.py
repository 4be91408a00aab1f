"""Stopping the server when a model cannot load, and its exit status then."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

from bentoml._internal.context import server_context

from bento.serving.start_failures import START_FAILED

logger = logging.getLogger(__name__)
STARTUP_FAILED_STATUS = 1


def stop_server(reason: str) -> None:
    """Stop the whole server: for a model that cannot load, which would fail the same way on every one of
    the restarts BentoML would otherwise make, forever, behind a 503. Stopped, the failure is seen, and an
    orchestrator restarts the server with its own back-off. The server then exits non-zero (see
    `exit_nonzero_after_failed_start`), and says why, once: here only at debug level."""
    if server_context.worker_index is None:  # no arbiter to tell: `bentoml serve --development`
        logger.error("%s; stopping the server", reason)
        return
    logger.debug("%s; stopping the server", reason)
    # A worker process under BentoML's arbiter, our parent
    _failure_marker(os.getppid()).write_text(reason)
    os.kill(os.getppid(), signal.SIGTERM)


def exit_nonzero_after_failed_start() -> None:
    """In `bentoml serve`'s own process (the arbiter, which imports the service too): exit with status 1,
    not BentoML's 0, when a worker stopped the server because it could not start. systemd's
    Restart=on-failure, a Kubernetes Job and `embento serve && ...` all read 0 as success."""
    if server_context.worker_index is not None:
        return
    marker = _failure_marker(os.getpid())
    marker.unlink(missing_ok=True)  # left by an earlier process of the same pid

    def exit_nonzero() -> None:
        if marker.is_file():
            reason = marker.read_text()
            marker.unlink(missing_ok=True)
            print(f"{START_FAILED}{reason}", file=sys.stderr, flush=True)
            os._exit(STARTUP_FAILED_STATUS)  # the only way to change the status from an exit handler

    atexit.register(exit_nonzero)


def _failure_marker(arbiter_pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"embento-start-failed-{arbiter_pid}"
