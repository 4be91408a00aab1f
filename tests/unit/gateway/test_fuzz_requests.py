"""Property-based fuzzing of the request-validation layer: whatever JSON arrives, a request model and the
checks behind it either accept it or raise a validation error that becomes a 4xx, nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from config.errors import EmbentoError
from config.settings import EmbentoConfig
from gateway.validation import check_classify, check_embed, check_rank
from gateway.wire import cohere, infinity, openai
from gateway.wire.common import RerankRequest, rank_query
from models.base import ModelInfo

TEXT_MODEL = ModelInfo(
    served_model_name="m",
    model_id="m",
    kind="embed",
    modalities=["text"],
    backend="torch",
    dimension=8,
    max_input_tokens=16,
    normalized=True,
    device="cpu",
    dtype="float32",
)
CLIP_MODEL = ModelInfo(
    served_model_name="c",
    model_id="c",
    kind="clip",
    modalities=["text", "image"],
    backend="torch",
    dimension=8,
    max_input_tokens=16,
    normalized=True,
    device="cpu",
    dtype="float32",
)

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)
FIELDS = [
    "input",
    "model",
    "encoding_format",
    "dimensions",
    "modality",
    "prompt_name",
    "query",
    "documents",
    "top_n",
    "return_documents",
    "raw_scores",
    "text",
    "image",
    "audio",
]
# Bodies that mostly use the real field names, so values reach the checks behind the models.
bodies = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6) | json_values

LIMITS = EmbentoConfig(max_client_batch_size=64, max_media_items=8, max_item_chars=1000)
SERVED = {"m": TEXT_MODEL, "c": CLIP_MODEL}
RERANKER = ModelInfo(
    served_model_name="r",
    model_id="r",
    kind="rerank",
    modalities=["text"],
    backend="torch",
    dimension=1,
    max_input_tokens=16,
    normalized=False,
    device="cpu",
    dtype="float32",
)
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(parse: Any, body: Any, then: Any) -> None:
    try:
        request = parse(body)
    except ValidationError:
        return  # a 400
    try:
        then(request)
    except EmbentoError:
        return  # mapped to a 4xx by gateway/error_responses.py


@FUZZ
@given(bodies)
def test_embedding_requests(body):
    for info in (TEXT_MODEL, CLIP_MODEL):
        check(
            openai.EmbeddingRequest.model_validate,
            body,
            lambda r, info=info: check_embed(openai.embed_query(r), info, LIMITS, None, SERVED),
        )


@FUZZ
@given(bodies)
def test_legacy_media_requests(body):
    check(
        infinity.LegacyMediaRequest.model_validate,
        body,
        lambda r: check_embed(infinity.media_query(r, "image"), CLIP_MODEL, LIMITS, None, SERVED),
    )


@FUZZ
@given(bodies)
def test_rerank_requests(body):
    for model in (RerankRequest, cohere.CohereV2RerankRequest):
        check(model.model_validate, body, lambda r: check_rank(rank_query(r), RERANKER, LIMITS))


@FUZZ
@given(bodies)
def test_classify_requests(body):
    check(infinity.ClassifyRequest.model_validate, body, lambda r: check_classify(infinity.classify_query(r), LIMITS))


@pytest.mark.parametrize("body, items", [({"input": "a"}, 1), ({"input": ["a", "b"]}, 2), ({"input": [[1, 2]]}, 1)])
def test_valid_bodies_pass_so_the_fuzz_reaches_the_checks(body, items):
    query = openai.embed_query(openai.EmbeddingRequest.model_validate(body))
    check_embed(query, TEXT_MODEL, LIMITS, None, SERVED)
    assert len(query.items) == items
