"""The HTTP API fuzzed from its own OpenAPI document (schemathesis): for every operation the running server
documents, bodies that follow the schema and bodies that break it. Each answer comes within the timeout
and is never a 5xx; every error is in its route's shape (TEI's on TEI's routes, else OpenAI's); the server stays
alive throughout."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from gateway.http.errors import ERROR_SHAPES
from gateway.wire.shared_rerank import is_tei_rerank
from tests.asserts import assert_openai_error, assert_tei_error, assert_voyage_error

pytestmark = pytest.mark.server
EXAMPLES = 20  # per operation and mode: about 500 requests in all
PROBES = ("/livez", "/healthz", "/readyz")
ERROR_CHECKS = {"openai": assert_openai_error, "tei": assert_tei_error, "voyage": assert_voyage_error}


def _error_shape(case: schemathesis.Case) -> str:
    """Each POST route's declared shape (TEI's, Voyage's), and TEI's on /rerank for TEI's body; else OpenAI's."""
    if case.method.upper() != "POST":
        return "openai"
    if case.path == "/rerank" and isinstance(case.body, dict) and is_tei_rerank(case.body):
        return "tei"
    return ERROR_SHAPES.get(case.path, "openai")


def test_no_generated_request_gets_a_5xx(server, client):
    # schemathesis' own pytest plugin does not run under pytest 9, so its strategies are driven here.
    schema = schemathesis.openapi.from_url(f"{server}/docs.json", wait_for_schema=60)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {"/v1/embeddings", "/v1/rerank", "/v2/rerank", "/v1/classify"} <= {op.path for op in operations}
    seen: list[tuple[str, int]] = []

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                phases=[Phase.generate],
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def exchange(case: schemathesis.Case) -> None:
                response = case.call(timeout=60)
                label = f"{case.method} {case.path}"
                seen.append((label, response.status_code))
                assert response.status_code < 500, f"{label} {case.body!r}: {response.text[:500]}"
                if response.status_code >= 400 and case.path not in PROBES:
                    ERROR_CHECKS[_error_shape(case)](response, response.status_code)
                assert client.get("/livez").status_code == 200

            try:
                exchange()
            except Unsatisfiable:  # an operation without parameters or body has nothing to break
                assert mode == GenerationMode.NEGATIVE and operation.method.upper() == "GET", operation.label
    refused = sum(status >= 400 for _, status in seen)
    assert refused and len(seen) - refused, "the fuzzing reached neither the models nor the validation"
