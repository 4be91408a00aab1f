"""A request's `keep_alive` changes how long its model stays loaded for every caller, so it is honoured only for a
caller the operator allowed (the keys file's `may_set_keep_alive`, or the admin key on a server with no API keys):
anyone else gets a 403 in the route's shape, naming the field, before any row reaches a model service. Every route
that takes the field, over the real `Engine` and a fake model service (`fake_engine.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from config.keys_file import Tenant
from gateway.tenants.keys import ADMIN, OPEN, TENANT, caller_id
from gateway.wire import cohere, openai, shared_rerank
from gateway.wire.common import RerankRequest
from tests.unit.gateway.fake_engine import EMBEDDER, RERANKER, answer, assert_refused

RANK = {"query": "q", "documents": ["a", "b"], "model": RERANKER}
ROUTES = [
    pytest.param(openai.embed, openai.EmbeddingRequest, {"input": ["x"], "model": EMBEDDER}, id="v1-embeddings"),
    pytest.param(cohere.rerank_v1, RerankRequest, RANK, id="v1-rerank"),
    pytest.param(cohere.rerank_v2, cohere.CohereV2RerankRequest, RANK, id="v2-rerank"),
    pytest.param(shared_rerank.rerank, shared_rerank.RerankBody, RANK, id="infinity-rerank"),
]
RESIDENT = Tenant(name="resident", may_set_keep_alive=True)


@pytest.fixture
def caller(request: pytest.FixtureRequest) -> Iterator[None]:
    token = TENANT.set(request.param)
    yield
    TENANT.reset(token)


@pytest.mark.parametrize("caller", [OPEN, Tenant(name="plain")], indirect=True, ids=["no-keys", "plain-tenant"])
@pytest.mark.parametrize("keep_alive", [0, -1, "5m"])
@pytest.mark.parametrize(("adapter", "body_model", "body"), ROUTES)
def test_keep_alive_is_refused_without_the_permission(serve, caller, keep_alive, adapter, body_model, body) -> None:
    status, answered, service = answer(serve, adapter, body_model, {**body, "keep_alive": keep_alive})
    assert answered["error"]["code"] == "forbidden", answered
    message = assert_refused((status, answered, service), 403, "keep_alive")
    assert ("admin key" if TENANT.get() is OPEN else "may_set_keep_alive") in message, message


@pytest.mark.parametrize("caller", [ADMIN, RESIDENT], indirect=True, ids=["admin-key", "permitted-tenant"])
@pytest.mark.parametrize(("adapter", "body_model", "body"), ROUTES)
def test_keep_alive_is_taken_from_a_permitted_caller(serve, caller, adapter, body_model, body) -> None:
    status, answered, _ = answer(serve, adapter, body_model, {**body, "keep_alive": 0})
    assert status == 200, answered


@pytest.mark.parametrize("caller", [OPEN], indirect=True)
@pytest.mark.parametrize(("adapter", "body_model", "body"), ROUTES)
def test_without_keep_alive_anyone_is_served(serve, caller, adapter, body_model, body: dict[str, Any]) -> None:
    assert answer(serve, adapter, body_model, body)[0] == 200


def test_a_caller_is_named_in_the_log_by_its_tenant_never_its_key() -> None:
    assert caller_id(ADMIN) == "admin"
    assert caller_id(RESIDENT) == "tenant 'resident'"
    assert not Tenant(name="t").may_set_keep_alive  # off unless the keys file says so
