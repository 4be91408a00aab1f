"""Property-based fuzzing of the request-validation layer: whatever JSON arrives, a request model and the
checks behind it either accept it or raise a validation error that becomes a 4xx, nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.cohere import CohereV2RerankRequest
from gateway.schemas import EmbeddingRequest, LegacyMediaRequest, validated_inputs
from gateway.scoring import ClassifyRequest, RerankRequest, validated_documents, validated_texts
from models.base import ModelInfo
from models.errors import EmbentoError

TEXT_MODEL = ModelInfo(served_model_name="m", model_id="m", kind="embed", modalities=["text"], backend="torch",
                       dimension=8, max_input_tokens=16, normalized=True, device="cpu", dtype="float32")
CLIP_MODEL = ModelInfo(served_model_name="c", model_id="c", kind="clip", modalities=["text", "image"],
                       backend="torch", dimension=8, max_input_tokens=16, normalized=True, device="cpu",
                       dtype="float32")

scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=20)
FIELDS = ["input", "model", "encoding_format", "dimensions", "modality", "prompt_name", "query", "documents",
          "top_n", "return_documents", "raw_scores", "text", "image", "audio"]
# Bodies that mostly use the real field names, so values reach the checks behind the models.
bodies = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6) | json_values

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(parse: Any, body: Any, then: Any) -> None:
    try:
        request = parse(body)
    except ValidationError:
        return  # a 400
    try:
        then(request)
    except EmbentoError:
        return  # mapped to a 4xx by gateway/errors.py


@FUZZ
@given(bodies)
def test_embedding_requests(body):
    for info in (TEXT_MODEL, CLIP_MODEL):
        check(EmbeddingRequest.model_validate, body, lambda r, info=info: validated_inputs(r, info, 64, 8, 1000))


@FUZZ
@given(bodies)
def test_legacy_media_requests(body):
    check(LegacyMediaRequest.model_validate, body,
          lambda r: validated_inputs(r.as_embedding_request("image"), CLIP_MODEL, 64, 8, 1000))


@FUZZ
@given(bodies)
def test_rerank_requests(body):
    for model in (RerankRequest, CohereV2RerankRequest):
        check(model.model_validate, body, lambda r: validated_documents(r, 64, 1000, text_documents=True))


@FUZZ
@given(bodies)
def test_classify_requests(body):
    check(ClassifyRequest.model_validate, body, lambda r: validated_texts(r, 64, 1000))


@pytest.mark.parametrize("body, items", [({"input": "a"}, 1), ({"input": ["a", "b"]}, 2), ({"input": [[1, 2]]}, 1)])
def test_valid_bodies_pass_so_the_fuzz_reaches_the_checks(body, items):
    assert len(validated_inputs(EmbeddingRequest.model_validate(body), TEXT_MODEL, 64, 8, 1000)) == items
