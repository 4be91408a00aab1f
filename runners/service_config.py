"""BentoML settings of the model services: service config, threads, placement, row bounds, worker devices."""

from __future__ import annotations

from bentoml._internal.context import server_context

from bento.serving.placement import (
    Placement,
    gateway_workers,
    place_service,
    runs_on_gpu,
    usable_cores,
    visible_gpus,
    worker_device,
)
from config.served import served_config
from config.settings import ModelConfig
from models.batching import default_batch_size
from models.kinds import model_kind, spec

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


def model_service_of(model: ModelConfig) -> str:
    """The model service that runs it (rerankers and classifiers share one)."""
    return spec(model_kind(model)).model_service


def cpu_threads() -> int:
    """Intra-op threads for one model service. Each service runs its own thread pool; with every pool as
    wide as the machine, a text embedder, a reranker and a CLIP served together on 2 cores answered 1.4,
    1.2 and 21 requests/s under mixed load, against 2.2, 1.9 and 83 with one thread each. Past 4 cores the
    gateway workers keep one core each (bento/serving/placement.py)."""
    configured = served_config()
    if configured.cpu_threads:
        return configured.cpu_threads
    services = {model_service_of(m) for m in configured.models}
    cores = usable_cores()
    gateway = gateway_workers(configured, cores) if cores > 4 else 0
    return max(1, (cores - gateway) // len(services))


def model_service_config(service: str) -> dict:
    """BentoML's settings for a model service: workers and GPUs from its placement."""
    configured = served_config()
    gpus = visible_gpus()
    return {**MODEL_SERVICE_CONFIG, **_placement(service, configured.models, gpus).service_config()}


def _placement(service: str, models: list[ModelConfig], gpus: int) -> Placement:
    from bento.packaging.container_image import ARGS

    by_service: dict[str, list[ModelConfig]] = {}
    for model in models:
        by_service.setdefault(model_service_of(model), []).append(model)
    gpu_services = sum(
        ARGS.accel == "cuda" or any(runs_on_gpu(m, gpus) for m in group) for group in by_service.values()
    )
    return place_service(by_service.get(service, []), gpu_services, gpus, ARGS.accel)


def dispatch_max_rows() -> int:
    """Rows one call of a model service may gather: enough for several passes of the largest model batch (on a GPU,
    the largest pass the device-sized defaults allow, since the gateway cannot know the device's memory)."""
    gpus = visible_gpus()
    return max(64, 4 * max(m.batch_size or default_batch_size(runs_on_gpu(m, gpus)) for m in served_config().models))


def placed(configs: list[ModelConfig], service: str) -> list[ModelConfig]:
    """The configs with `device` as this worker of the model service takes it (one GPU per worker)."""
    workers = _placement(service, served_config().models, visible_gpus()).workers
    return [
        cfg.model_copy(update={"device": worker_device(cfg.device, server_context.worker_index, workers)})
        for cfg in configs
    ]


def allow_partial() -> bool:
    return served_config().allow_partial


def models_of_service(service: str) -> list[ModelConfig]:
    """The configured models a model service runs."""
    return [m for m in served_config().models if model_service_of(m) == service]
