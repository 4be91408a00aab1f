"""Runner-side pieces that can be checked without starting a server."""

from __future__ import annotations

import os

from bentoml._internal.marshal.dispatcher import Optimizer

from bento.serving.patches import make_work_conserving


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
        kind: {spec.service_api, spec.live_api} <= set(MODEL_SERVICES[spec.model_service].apis)
        for kind, spec in KIND_SPECS.items()
    } == dict.fromkeys(KIND_SPECS, True)
    assert all(not MODEL_SERVICES[spec.model_service].apis[spec.live_api].batchable for spec in KIND_SPECS.values())


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


def test_rows_travel_to_the_model_service_as_the_objects_they_are():
    """BentoML's client pickles `model_dump()` of a call's input: the rows go as themselves (no dicts validated
    back into models on the other side), arrays included; JSON mode still writes them as JSON."""
    import numpy as np
    from _bentoml_impl.serde import PickleSerde

    from models.base import ModelInput, TokenizedText
    from runners import MODEL_SERVICES
    from runners.model_services import RowBatch

    texts = TokenizedText.rows("m", [[101, 7, 102], [101, 8, 9, 102]], normalize=False, task="query")
    media = [ModelInput(model="c", modality="image", arrays={"pixel_values": np.ones((3, 2, 2))}, length=4)]
    for service, api, rows in (("TextEmbedder", "embed", texts), ("ClipEmbedder", "encode", media)):
        spec = MODEL_SERVICES[service].apis[api].input_spec
        call = spec.from_inputs(rows)
        dumped = call.model_dump()["rows"]
        assert isinstance(dumped, RowBatch) and all(a is b for a, b in zip(dumped.rows, rows))
        assert call.model_dump(mode="json")["rows"] == [row.model_dump(mode="json") for row in rows]
        serde = PickleSerde()
        arrived = serde.deserialize_model(serde.serialize_model(call), spec).rows
        assert [type(row) for row in arrived] == [type(row) for row in rows]
        for sent, got in zip(rows, arrived):
            assert sent.model_dump(exclude={"arrays"}) == got.model_dump(exclude={"arrays"})
        if service == "ClipEmbedder":
            assert np.array_equal(arrived[0].arrays["pixel_values"], media[0].arrays["pixel_values"])
