"""Per-model Prometheus metrics on /metrics: the gateway's (requests by status, inputs, tokens, latency by
stage) and the model services' (inputs and tokens run, passes, forward time) agree with what was sent."""

from __future__ import annotations

import pytest

from tests.conftest import MINILM, TINY_RERANKER, metric

pytestmark = pytest.mark.server
STAGES = ("preprocess", "model_service", "postprocess", "total")


def test_each_model_counts_its_requests_inputs_tokens_and_stages(client):
    before = client.get("/metrics").text
    embedded = client.post("/v1/embeddings", json={"model": MINILM, "input": ["a b c", "d e"]})
    ranked = client.post("/rerank", json={"model": TINY_RERANKER, "query": "q", "documents": ["a", "b", "c"]})
    unknown = client.post("/v1/embeddings", json={"model": "not-served", "input": "x"})
    assert (embedded.status_code, ranked.status_code, unknown.status_code) == (200, 200, 404)
    after = client.get("/metrics").text

    def delta(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    for model, response, inputs in ((MINILM, embedded, 2), (TINY_RERANKER, ranked, 3)):
        tokens = response.json()["usage"]["total_tokens"]
        assert delta("embento_requests_total", model=model, status="200") == 1
        assert delta("embento_request_inputs_total", model=model) == inputs
        assert delta("embento_request_tokens_total", model=model) == tokens
        for stage in STAGES:
            assert delta("embento_stage_seconds_count", model=model, stage=stage) == 1, stage
        assert delta("embento_model_inputs_total", model=model) == inputs
        assert delta("embento_model_tokens_total", model=model) == tokens
        assert delta("embento_model_batch_size_sum", model=model) == inputs
        assert delta("embento_model_forward_seconds_count", model=model) >= 1
    # A name from the request never becomes a label: refused before a model was chosen, it counts as "none".
    assert delta("embento_requests_total", model="none", status="404") == 1
    assert "not-served" not in after
