"""The OpenAI adapter (`gateway/wire/openai.py`, POST /v1/embeddings) over the real `Engine`, a fake model service
and MiniLM's real tokenizer (`fake_engine.py`): every bad body refused with its status and the field it names,
before any row reaches a model service, and good ones answered from the service's outputs."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from pydantic import ValidationError

from config.settings import EmbentoConfig
from gateway.wire import openai
from tests.unit.gateway.fake_engine import CLASSIFIER, CLIP, EMBEDDER, answer, assert_refused

# OpenAI: every bad body the server's tests sent (tests/server/test_errors.py), answered by the engine alone
BAD_EMBEDDINGS = [
    pytest.param({"input": [], "model": EMBEDDER}, 400, "input", id="empty-list"),
    pytest.param({"input": "", "model": EMBEDDER}, 400, "input", id="empty-string"),
    pytest.param({"input": ["ok", ""], "model": EMBEDDER}, 400, "input", id="empty-string-in-list"),
    pytest.param({"input": [[]], "model": EMBEDDER}, 400, "input", id="empty-token-list"),
    pytest.param({"input": ["x"] * 2049, "model": EMBEDDER}, 400, "input", id="2049-inputs"),
    pytest.param({"input": [1.5, 2], "model": EMBEDDER}, 400, "input", id="float-items"),
    pytest.param({"input": ["a", 3], "model": EMBEDDER}, 400, "input", id="mixed-items"),
    pytest.param({"input": [True], "model": EMBEDDER}, 400, "input", id="bool-items"),
    pytest.param({"input": [{"txt": "a"}], "model": EMBEDDER}, 400, "input", id="unknown-object-items"),
    pytest.param({"input": [[["deep"]]], "model": EMBEDDER}, 400, "input", id="nested-garbage"),
    pytest.param({"input": None, "model": EMBEDDER}, 400, "input", id="null-input"),
    pytest.param({"model": EMBEDDER}, 400, "input", id="missing-input"),
    pytest.param({"input": "x", "model": "no-such-model"}, 404, "model", id="unknown-model"),
    pytest.param({"input": "x", "model": EMBEDDER, "dimensions": 0}, 400, "dimensions", id="dimensions-0"),
    pytest.param({"input": "x", "model": EMBEDDER, "dimensions": -3}, 400, "dimensions", id="dimensions-negative"),
    pytest.param({"input": "x", "model": EMBEDDER, "dimensions": 385}, 400, "dimensions", id="dimensions-too-large"),
    pytest.param({"input": "x", "model": EMBEDDER, "dimensions": "12"}, 400, "dimensions", id="dimensions-string"),
    pytest.param(
        {"input": "x", "model": EMBEDDER, "encoding_format": "float16"}, 400, "encoding_format", id="unknown-encoding"
    ),
    pytest.param({"input": [[101, 30522]], "model": EMBEDDER}, 400, "input", id="token-id-too-large"),
    pytest.param({"input": [[101, -1]], "model": EMBEDDER}, 400, "input", id="token-id-negative"),
    pytest.param({"input": "x", "model": EMBEDDER, "modality": "image"}, 400, "model", id="modality-image"),
    pytest.param({"input": "x", "model": EMBEDDER, "prompt_name": "nope"}, 400, "prompt_name", id="unknown-prompt"),
    pytest.param([1, 2, 3], 400, None, id="body-not-an-object"),
    # and the controls that apply to some kinds of model only
    pytest.param(
        {"input": "x", "model": EMBEDDER, "max_active_dims": 4},
        400,
        "max_active_dims",
        id="max-active-dims-on-a-dense-model",
    ),
    pytest.param({"input": "x", "model": EMBEDDER, "max_tokens": 0}, 400, "max_tokens", id="max-tokens-0"),
    pytest.param({"input": "x", "model": CLIP, "normalize": False}, 400, "normalize", id="normalize-off-for-clip"),
    pytest.param({"input": "x", "model": CLIP, "instruction": "find"}, 400, "instruction", id="instruction-for-clip"),
    pytest.param({"input": [[1, 2]], "model": CLIP}, 400, "input", id="token-ids-for-clip"),
    pytest.param(
        {"input": "x", "model": EMBEDDER, "instruction": "a", "prompt_name": "query"},
        400,
        "instruction",
        id="instruction-and-prompt",
    ),
    pytest.param({"input": "x", "model": CLASSIFIER}, 400, "model", id="a-classifier-cannot-embed"),
    pytest.param({"input": ["x"] * 65, "model": CLIP, "modality": "image"}, 400, "input", id="65-images"),
    # a text and an image as one input: only a vision-language embedder (vl-embed) takes one; a video nobody takes
    pytest.param(
        {"input": [{"text": "a", "image": "data:image/png;base64,AA=="}], "model": CLIP},
        400,
        "input",
        id="text-and-image-in-one-input-for-clip",
    ),
    pytest.param(
        {"input": [{"text": "a", "image": "data:image/png;base64,AA=="}], "model": EMBEDDER},
        400,
        "input",
        id="text-and-image-in-one-input-for-a-text-model",
    ),
    pytest.param({"input": [{"video": "data:video/mp4;base64,AA=="}], "model": CLIP}, 400, "input", id="video"),
]


def test_a_typed_item_with_text_and_image_is_one_mixed_input():
    body = openai.EmbeddingRequest.model_validate(
        {"input": ["plain", {"text": "a cat", "image": "data:image/png;base64,AA=="}, {"image": "https://x/y.png"}]}
    )
    plain, mixed, image = openai.embed_query(body).items
    assert not plain.parts and not image.parts and image.modality == "image"
    assert [(part.modality, part.value) for part in mixed.all_parts] == [
        ("text", "a cat"),
        ("image", "data:image/png;base64,AA=="),
    ]


@pytest.mark.parametrize("body, status, param", BAD_EMBEDDINGS)
def test_bad_embedding_bodies(serve, body, status, param):
    assert_refused(answer(serve, openai.embed, openai.EmbeddingRequest, body), status, param)


def test_unknown_model_lists_served_names(serve):
    outcome = answer(serve, openai.embed, openai.EmbeddingRequest, {"input": "x", "model": "gpt-x"})
    message = assert_refused(outcome, 404, "model")
    assert EMBEDDER in message and outcome[1]["error"]["code"] == "model_not_found"


def test_a_too_long_text_names_its_index(serve):
    too_many = EmbentoConfig().max_item_chars + 1
    body = {"input": ["fine", "a" * too_many], "model": EMBEDDER}
    message = assert_refused(answer(serve, openai.embed, openai.EmbeddingRequest, body), 400, "input")
    assert message.startswith(f"input[1] has {too_many} characters")


def test_embeddings_answer_from_the_service_outputs(serve, tokenizers):
    status, body, service = answer(
        serve, openai.embed, openai.EmbeddingRequest, {"input": ["a fox", "a dog"], "model": EMBEDDER, "dimensions": 8}
    )
    assert status == 200 and [row.input_ids for row in service.rows] == tokenizers[EMBEDDER].encode_texts(
        ["a fox", "a dog"]
    )
    vectors = np.array([item["embedding"] for item in body["data"]])
    assert vectors.shape == (2, 8) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert body["usage"]["prompt_tokens"] == sum(row.length for row in service.rows)


def test_int8_codes_from_the_calibrated_scale(serve):
    status, body, _ = answer(
        serve, openai.embed, openai.EmbeddingRequest, {"input": "a fox", "model": EMBEDDER, "encoding_format": "int8"}
    )
    assert status == 200 and all(isinstance(code, int) and -128 <= code <= 127 for code in body["data"][0]["embedding"])


def test_base64_is_the_little_endian_float32_bytes_of_the_numbers(serve):
    body = {"input": ["a fox", "a dog"], "model": EMBEDDER}
    _, numbers, _ = answer(serve, openai.embed, openai.EmbeddingRequest, body)
    status, encoded, _ = answer(serve, openai.embed, openai.EmbeddingRequest, {**body, "encoding_format": "base64"})
    assert status == 200 and all(isinstance(item["embedding"], str) for item in encoded["data"])
    for plain, packed in zip(numbers["data"], encoded["data"]):
        vector = np.frombuffer(base64.b64decode(packed["embedding"]), dtype="<f4")
        # The JSON numbers are float32's shortest digits: they parse back to the very bytes base64 carries.
        assert vector.shape == (384,) and np.array_equal(np.array(plain["embedding"], dtype=np.float32), vector)
    assert encoded["usage"] == numbers["usage"]


@pytest.mark.parametrize(
    ("item", "key"),
    [
        pytest.param({"text": "private words", "foo": 1}, "foo", id="a-text-and-an-unknown-key"),
        pytest.param({"txt": "private words"}, "txt", id="a-misspelt-key"),
    ],
)
def test_a_typed_item_with_an_unknown_key_is_told_the_key_and_never_its_text(serve, item, key):
    outcome = answer(serve, openai.embed, openai.EmbeddingRequest, {"input": [{"text": "a"}, item]})
    assert_refused(outcome, 400, "input")
    with pytest.raises(ValidationError) as refused:
        openai.EmbeddingRequest.model_validate({"input": [{"text": "a"}, item]})
    message = refused.value.errors()[0]["msg"]
    assert f"input[1] has an unknown key '{key}'" in message and "private" not in message, message
