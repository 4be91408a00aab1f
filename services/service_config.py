"""BentoML settings shared by every model service."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bentoml._internal.context import server_context

from models.base import Kind
from models.batching import default_batch_size
from models.config import ModelConfig
from models.errors import EmbentoError
from models.kinds import model_kind
from runners.placement import (
    Placement,
    gateway_workers,
    place_service,
    runs_on_gpu,
    usable_cores,
    visible_gpus,
    worker_device,
)
from runners.start_failures import START_FAILED
from runners.store import served_config

logger = logging.getLogger(__name__)
T = TypeVar("T")

# BentoML 1.4.30+ recycles the inter-service connection pool every 100 requests / 300 s while requests
# are still in flight, which surfaces as 500s under concurrency (bentoml #5540, #5698). Never recycle.
MODEL_SERVICE_CONFIG = {
    "traffic": {"timeout": 600},
    "runner_connection": {"max_requests": 10**9, "max_age": 1e9},
    "logging": {"access": {"enabled": False}},
}
# The dispatcher cancels queued work it predicts will miss this deadline (a 503). The gateway owns
# request deadlines, so the dispatcher's is only a backstop.
DISPATCH_MAX_LATENCY_MS = 300_000
STARTUP_FAILED_STATUS = 1


# Which model service runs each kind (rerankers and classifiers share one); service.py composes them.
MODEL_SERVICE_OF: dict[Kind, str] = {
    "embed": "TextEmbedder", "sparse": "TextEmbedder", "rerank": "Reranker", "classify": "Reranker",
    "clip": "ClipEmbedder", "clap": "ClapEmbedder", "colpali": "ColPaliEmbedder",
}


def cpu_threads() -> int:
    """Intra-op threads for one model service. Each service runs its own thread pool; with every pool as
    wide as the machine, a text embedder, a reranker and a CLIP served together on 2 cores answered 1.4,
    1.2 and 21 requests/s under mixed load, against 2.2, 1.9 and 83 with one thread each. Past 4 cores the
    gateway workers keep one core each (runners/placement.py)."""
    configured = served_config()
    if configured.cpu_threads:
        return configured.cpu_threads
    services = {MODEL_SERVICE_OF[model_kind(m)] for m in configured.models}
    cores = usable_cores()
    gateway = gateway_workers(configured, cores) if cores > 4 else 0
    return max(1, (cores - gateway) // len(services))


def model_service_config(*kinds: Kind) -> dict:
    """BentoML's settings for the model service of these kinds: workers and GPUs from its placement."""
    configured = served_config()
    gpus = visible_gpus()
    return {**MODEL_SERVICE_CONFIG, **_placement(kinds, configured.models, gpus).service_config()}


def _placement(kinds: tuple[Kind, ...], models: list[ModelConfig], gpus: int) -> Placement:
    from runners.image import ARGS

    by_service: dict[str, list[ModelConfig]] = {}
    for model in models:
        by_service.setdefault(MODEL_SERVICE_OF[model_kind(model)], []).append(model)
    gpu_services = sum(ARGS.accel == "cuda" or any(runs_on_gpu(m, gpus) for m in group)
                       for group in by_service.values())
    return place_service([m for m in models if model_kind(m) in kinds], gpu_services, gpus, ARGS.accel)


def dispatch_max_rows() -> int:
    """Rows one runner call may gather: enough for several passes of the largest model batch (on a GPU,
    the largest pass the device-sized defaults allow, since the gateway cannot know the device's memory)."""
    gpus = visible_gpus()
    return max(64, 4 * max(m.batch_size or default_batch_size(runs_on_gpu(m, gpus)) for m in served_config().models))


def placed(configs: list[ModelConfig], kinds: tuple[Kind, ...]) -> list[ModelConfig]:
    """The configs with `device` as this worker of the model service takes it (one GPU per worker)."""
    workers = _placement(kinds, served_config().models, visible_gpus()).workers
    return [cfg.model_copy(update={"device": worker_device(cfg.device, server_context.worker_index, workers)})
            for cfg in configs]


def allow_partial() -> bool:
    return served_config().allow_partial


def models_of_kind(*kinds: Kind) -> list[ModelConfig]:
    """The configured models a runner serves."""
    return [m for m in served_config().models if model_kind(m) in kinds]


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


def server_file(name: str) -> Path | None:
    """A file every worker process of this server shares (None outside BentoML's arbiter). Named by the
    arbiter's pid and start time, so a later server that gets the same pid never reads this one's; in
    shared memory where there is some. The arbiter removes them when it exits (`remove_server_files`)."""
    if server_context.worker_index is None:
        return None
    return _server_folder() / f"embento-{_process_key(os.getppid())}-{name}"


def remove_server_files() -> None:
    """In the arbiter, at exit: the files its workers shared."""
    if server_context.worker_index is not None:
        return
    pattern = f"embento-{_process_key(os.getpid())}-*"
    atexit.register(lambda: [path.unlink(missing_ok=True) for path in _server_folder().glob(pattern)])


def _server_folder() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _process_key(pid: int) -> str:
    try:  # field 22 of /proc/<pid>/stat: the start time in clock ticks (after the parenthesised name)
        started = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        started = "0"
    return f"{pid}-{started}"


def load_models(
    configs: list[ModelConfig], load: Callable[[ModelConfig], T], allow_partial: bool
) -> tuple[dict[str, T], dict[str, str]]:
    """Each model loaded, by served name, and why the others failed. A failure stops the server, or with
    `allow_partial` is logged and recorded while the other models load and serve."""
    loaded: dict[str, T] = {}
    failed: dict[str, str] = {}
    for cfg in configs:
        try:
            loaded[cfg.served_model_name] = load(cfg)
        except Exception as exc:  # any cause: loading again would meet it again
            reason = exc.message if isinstance(exc, EmbentoError) else f"a model failed to load: {exc!r}"
            if not allow_partial:
                stop_server(reason)
                raise
            logger.error("%s; serving the other models (allow_partial)", reason)
            failed[cfg.served_model_name] = reason
    return loaded, failed
