"""Issue 50 through a server of its own serving a tiny Qwen3-VL-Embedding: OpenAI's SDK sends a text, an image, and
a text with an image as one input (a typed item with both keys), and gets sentence-transformers 6's vectors (the
reference venv's); a mixed input is cached under all its parts; a video is a 400 in OpenAI's shape; a corrupt image
fails its own request only while concurrent requests are answered. An image sent to a text-only model (MiniLM, on
the session's server) is a 400 too."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from testkit.media import data_uri
from testkit.vl_checkpoints import QUERY_PROMPT
from tests.asserts import assert_openai_error
from tests.conftest import MINILM, running_server
from tests.vl_reference import MIXED_TEXT, TEXT

pytestmark = pytest.mark.server

VL = "tiny-qwen3-vl-embedding"
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def vl_server(tmp_path_factory: pytest.TempPathFactory, vl_reference) -> Iterator[str]:
    config = {"models": [{"model_id": str(vl_reference.folder), "served_model_name": VL, "cache": True}]}
    with running_server(tmp_path_factory.mktemp("vl-embed"), config) as (url, _):
        yield url


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def png(data: bytes) -> str:
    return data_uri(data, "image/png")


def test_the_three_input_shapes_through_openais_sdk(vl_server, vl_reference) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{vl_server}/v1", api_key="unused")
    images = vl_reference.images
    items = [{"text": TEXT}, {"image": png(images["wide"])}, {"text": MIXED_TEXT, "image": png(images["small"])}]
    answer = client.embeddings.create(model=VL, input=items)  # type: ignore[arg-type]  # Embento's typed items
    expected = [vl_reference.text, vl_reference.image, vl_reference.mixed]
    assert [item.index for item in answer.data] == [0, 1, 2]
    for item, reference in zip(answer.data, expected):
        assert cosine(item.embedding, reference) >= MIN_COSINE
    assert answer.usage.prompt_tokens > 0
    models = {card.id: card for card in client.models.list().data}
    assert models[VL].model_extra["modalities"] == ["text", "image"]  # type: ignore[index]


def test_a_mixed_input_is_cached_under_all_its_parts(vl_server, vl_reference) -> None:
    image = png(vl_reference.images["small"])
    first = {"model": VL, "input": [{"text": MIXED_TEXT, "image": image}], "encoding_format": "float"}
    other_text = {**first, "input": [{"text": TEXT, "image": image}]}
    computed = httpx.post(f"{vl_server}/v1/embeddings", json=first, timeout=120).json()
    hit = httpx.post(f"{vl_server}/v1/embeddings", json=first, timeout=120).json()
    other = httpx.post(f"{vl_server}/v1/embeddings", json=other_text, timeout=120).json()
    assert hit["usage"]["prompt_tokens_details"]["cached_tokens"] == hit["usage"]["prompt_tokens"]
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # the same image with another text
    assert hit["data"] == computed["data"]
    assert cosine(other["data"][0]["embedding"], computed["data"][0]["embedding"]) < MIN_COSINE


def test_a_video_is_a_400(vl_server) -> None:
    body = {"model": VL, "input": [{"text": TEXT}, {"video": "data:video/mp4;base64,AAAA"}]}
    error = assert_openai_error(httpx.post(f"{vl_server}/v1/embeddings", json=body, timeout=60), 400)
    assert "video" in error["message"] and "input[1]" in error["message"]


def test_a_corrupt_image_fails_its_own_request_only(vl_server, vl_reference) -> None:
    images = vl_reference.images
    good = {"model": VL, "input": [{"image": png(images["wide"])}, {"text": TEXT}], "encoding_format": "float"}
    bad = {"model": VL, "input": [{"text": TEXT}, {"text": MIXED_TEXT, "image": png(images["small"][:50])}]}

    def post(body: dict) -> httpx.Response:
        return httpx.post(f"{vl_server}/v1/embeddings", json=body, timeout=120)

    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(post, [good, bad, good, good, bad, good]))
    for response in answers[0], answers[2], answers[3], answers[5]:
        assert response.status_code == 200, response.text
        vectors = [item["embedding"] for item in response.json()["data"]]
        assert cosine(vectors[0], vl_reference.image) >= MIN_COSINE
        assert cosine(vectors[1], vl_reference.text) >= MIN_COSINE
    for response in answers[1], answers[4]:
        error = assert_openai_error(response, 400, "input")
        assert "input[1]" in error["message"]


def test_an_image_to_a_text_only_model_is_a_400(client: httpx.Client, vl_reference) -> None:
    body = {"model": MINILM, "input": [{"image": png(vl_reference.images["wide"])}]}
    assert_openai_error(client.post("/v1/embeddings", json=body), 400)
    mixed = {"model": MINILM, "input": [{"text": TEXT, "image": png(vl_reference.images["wide"])}]}
    assert_openai_error(client.post("/v1/embeddings", json=mixed), 400)


def test_the_query_prompt_through_input_type_and_instruction(vl_server, vl_reference) -> None:
    """OpenAI's SDK with Embento's `input_type` and `instruction`: the card's query framing, cached apart from the
    plain text's (the server caches this model)."""
    from openai import OpenAI

    client = OpenAI(base_url=f"{vl_server}/v1", api_key="unused")
    plain = client.embeddings.create(model=VL, input=[TEXT]).data[0].embedding
    assert cosine(plain, vl_reference.text) >= MIN_COSINE
    for extra in ({"input_type": "search_query"}, {"instruction": QUERY_PROMPT}, {"prompt_name": "query"}):
        framed = client.embeddings.create(model=VL, input=[TEXT], extra_body=extra).data[0].embedding
        assert cosine(framed, vl_reference.query) >= MIN_COSINE, extra
