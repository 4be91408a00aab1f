"""Runner-side pieces that can be checked without starting a server."""

from __future__ import annotations

import os

from bentoml._internal.marshal.dispatcher import Optimizer

from bento.patches import make_work_conserving


def test_dispatcher_never_holds_requests_for_an_idle_model():
    make_work_conserving()
    optimizer = Optimizer(max_latency=300.0)
    for n in range(1, 30):  # batches that sat queued 200 ms behind a running batch
        optimizer.log_outbound(n=n, wait=0.2, duration=0.01 + 0.003 * n)
    optimizer.trigger_refresh()
    assert optimizer.wait == 0
    assert abs(optimizer.o_a - 0.003) < 1e-6 and abs(optimizer.o_b - 0.01) < 1e-6  # the latency model is kept


def test_every_kind_names_the_model_service_and_the_api_that_run_it():
    from models.kinds import KIND_SPECS
    from runners import MODEL_SERVICES

    assert {spec.model_service for spec in KIND_SPECS.values()} == set(MODEL_SERVICES)
    assert all(service.name == name for name, service in MODEL_SERVICES.items())
    assert {
        kind: spec.service_api in MODEL_SERVICES[spec.model_service].apis for kind, spec in KIND_SPECS.items()
    } == dict.fromkeys(KIND_SPECS, True)


def test_model_services_share_the_cores_unless_told_otherwise(monkeypatch):
    from config.settings import EmbentoConfig, ModelConfig
    from runners import service_config as settings

    cores = len(os.sched_getaffinity(0))
    text, reranker = ModelConfig(model_id="a", kind="embed"), ModelConfig(model_id="b", kind="rerank")
    for models, threads in (([text], cores), ([text, reranker], max(1, cores // 2))):
        monkeypatch.setattr(settings, "served_config", lambda models=models: EmbentoConfig(models=models))
        assert settings.cpu_threads() == threads
    monkeypatch.setattr(settings, "served_config", lambda: EmbentoConfig(models=[text, reranker], cpu_threads=3))
    assert settings.cpu_threads() == 3
