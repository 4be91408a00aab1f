"""Which processes run where: how many gateway workers, one model-service worker per GPU, the device each
worker uses, and the GPUs each model service asks for.

Read without torch (the gateway never imports it): cores from BentoML's cgroup-aware count, GPUs from
NVML through BentoML, narrowed by `CUDA_VISIBLE_DEVICES` when it is set.

The split of a machine (the model behind the defaults; measured figures in docs/architecture.md):
- A gateway worker spends 0.8-0.9 ms of CPU per request (HTTP, validation, tokenizing, the call to a model
  service), so one core answers about 1,100-1,250 requests/s. A GPU embeds 10^4-10^5 short sentences/s, so on a
  GPU server the gateway is the bound: it gets the cores the model services leave, two per GPU (one for
  the model service's host work, collating and launching kernels; one for its HTTP and pickling), up to
  `MAX_GATEWAY_WORKERS`, past which each worker's memory (tokenizers, ~150 MB) buys little.
- On a CPU server the model is the bound (all-MiniLM-L6-v2: ~300 sentences/s on 2 cores against the
  gateway's 1,250 requests/s per core), so one gateway worker per 8 cores, and the model services get the
  rest as intra-op threads.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

from config.settings import EmbentoConfig, ModelConfig

MAX_GATEWAY_WORKERS = 8
CORES_PER_GPU = 2  # host cores each GPU's model service keeps busy
CORES_PER_GATEWAY_WORKER_ON_CPU = 8


@functools.cache
def _system() -> dict:
    from bentoml._internal.resource import system_resources

    return system_resources()


def usable_cores() -> int:
    """The cores this server may use: the cgroup quota where there is one, else the affinity mask."""
    return max(1, min(int(_system()["cpu"]), len(os.sched_getaffinity(0))))


def visible_gpus() -> int:
    """NVIDIA GPUs this process may use: those NVML lists, narrowed by `CUDA_VISIBLE_DEVICES` if it is set."""
    found = len(_system()["nvidia.com/gpu"])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return found
    return len([d for d in visible.split(",") if d.strip() and not d.strip().startswith("-")])


def runs_on_gpu(model: ModelConfig, gpus: int) -> bool:
    return model.device.startswith("cuda") or (model.device == "auto" and gpus > 0)


def default_gateway_workers(cores: int, gpus: int, models: Iterable[ModelConfig]) -> int:
    """Gateway processes for this machine when `gateway_workers` is unset (see the module's notes)."""
    if any(runs_on_gpu(model, gpus) for model in models):
        return max(1, min(MAX_GATEWAY_WORKERS, cores - CORES_PER_GPU * max(1, gpus)))
    return max(1, min(MAX_GATEWAY_WORKERS, cores // CORES_PER_GATEWAY_WORKER_ON_CPU))


def gateway_workers(config: EmbentoConfig, cores: int | None = None, gpus: int | None = None) -> int:
    if config.gateway_workers is not None:
        return config.gateway_workers
    return default_gateway_workers(
        usable_cores() if cores is None else cores, visible_gpus() if gpus is None else gpus, config.models
    )


def explicit_gpu(models: Iterable[ModelConfig]) -> bool:
    """A model that names its GPU (`cuda:N`) means that physical GPU: BentoML must not renumber the
    service's GPUs with `CUDA_VISIBLE_DEVICES`."""
    return any(model.device.startswith("cuda:") for model in models)  # the config allows only cuda:<digits>


@dataclass(frozen=True)
class Placement:
    """One model service's share of the GPUs (BentoML `resources.gpu`: fractional packs services on one
    GPU) and its worker count: one per whole GPU it gets, each on its own (`worker_device`)."""

    gpus: float | None  # None: no GPU resources declared (CPU, or models that name their GPU)
    workers: int = 1

    def service_config(self) -> dict:
        return {"workers": self.workers, **({"resources": {"gpu": self.gpus}} if self.gpus is not None else {})}


def place_service(models: list[ModelConfig], gpu_services: int, gpus: int, accel: str) -> Placement:
    """Where one model service runs, given the GPUs of this machine and how many services want one.

    With no GPU visible (building a CUDA Bento on a CPU machine, say) a CUDA service declares one GPU, what
    BentoCloud and Kubernetes then request per replica; on the serving machine the share is worked out
    again from the GPUs there. Services that outnumber the GPUs share them (two on one GPU: 0.5 each)."""
    wants_gpu = accel == "cuda" or any(runs_on_gpu(model, gpus) for model in models)
    if not models or not wants_gpu or explicit_gpu(models):
        return Placement(None)
    if gpus == 0:
        return Placement(1)
    share = gpus / max(1, gpu_services)
    if share < 1:
        return Placement(1 / math.ceil(gpu_services / gpus))
    whole = int(share)
    replicate = all(model.device in ("auto", "cuda") for model in models)
    return Placement(whole, workers=whole if replicate else 1)


def worker_device(requested: str, worker_index: int | None, workers: int) -> str:
    """The device one worker of a model service puts its models on. BentoML gives every worker of a service
    the same `CUDA_VISIBLE_DEVICES`; with one worker per GPU, worker i (1-based) takes the i-th of them."""
    if workers > 1 and worker_index is not None and requested in ("auto", "cuda"):
        return f"cuda:{(worker_index - 1) % workers}"
    return requested


def served_workers(service_name: str) -> int:
    """How many workers BentoML's arbiter runs for the service: its decorator's `workers`, or a BentoML
    configuration's override of it, as the arbiter resolves them (in a worker, after the service's app is made)."""
    from bentoml._internal.configuration.containers import BentoMLContainer
    from bentoml._internal.resource import system_resources

    workers = BentoMLContainer.config.services[service_name].get().get("workers") or 1
    if workers == "cpu_count":
        return int(system_resources()["cpu"]) or 1
    return int(workers)
