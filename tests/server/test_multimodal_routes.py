"""The multimodal shapes of Voyage's, Cohere's and Jina's routes through their own SDKs (or raw HTTP where none
sends the shape), on tiny CLIP with URL inputs allowed (`url_server`, tests/conftest.py): `voyageai`'s
`multimodal_embed` with texts, PIL images and image URLs, each vector equal to transformers' CLIP; one input of a
text and an image is a 400 in Voyage's shape (CLIP embeds one part per input), and in OpenAI's through Cohere's
`ClientV2.embed` (Cohere's routes answer errors in it); Jina's `{"image": …}` rerank documents rank as the images
they hold."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from testkit.media import IMAGES, data_uri
from tests.asserts import assert_openai_error, assert_voyage_error
from tests.conftest import TINY_CLIP
from tests.tolerance import assert_close, cosines

pytestmark = pytest.mark.server
MIN_COSINE = 0.9999
TWO_PARTS = "inputs[0] holds 2 parts; model 'tiny-clip' is a clip model and embeds one text or one image per input"


@pytest.fixture(scope="module")
def clip_reference(tiny_clip_path):
    """transformers' CLIP: a text's or a PIL image's projected vector."""
    import torch
    from transformers import AutoModel, AutoProcessor

    model = AutoModel.from_pretrained(str(tiny_clip_path)).eval()
    processor = AutoProcessor.from_pretrained(str(tiny_clip_path))

    def embed(value: str | Image.Image) -> np.ndarray:
        with torch.inference_mode():
            if isinstance(value, str):
                output = model.get_text_features(**processor.tokenizer([value], return_tensors="pt"))
            else:
                output = model.get_image_features(**processor(images=[value.convert("RGB")], return_tensors="pt"))
        return output.pooler_output[0].numpy()  # transformers 5: the projected vector

    return embed


def image(name: str) -> Image.Image:
    return Image.open(io.BytesIO(IMAGES[name][0]))


@pytest.fixture(scope="module")
def voyage(url_server):
    import voyageai

    return voyageai.Client(api_key="unused", base_url=f"{url_server}/v1", max_retries=0)


def test_voyage_sdk_embeds_texts_pil_images_and_urls_as_clip_does(voyage, files, clip_reference):
    texts = ["a photo of a fox", "a red square"]
    result = voyage.multimodal_embed(inputs=[[text] for text in texts], model=TINY_CLIP, input_type="document")
    want = np.stack([clip_reference(text) for text in texts])
    assert (cosines(result.embeddings, want) >= MIN_COSINE).all()
    assert result.text_tokens == result.total_tokens > 0 and result.image_pixels == 0
    # The SDK sends PIL images as lossless WebP data URIs: the same pixels.
    pictures = [image("png"), image("jpeg")]
    result = voyage.multimodal_embed(inputs=[[picture] for picture in pictures], model=TINY_CLIP)
    assert (cosines(result.embeddings, np.stack([clip_reference(p) for p in pictures])) >= MIN_COSINE).all()
    by_url = voyage.multimodal_embed(
        inputs=[
            {"content": [{"type": "image_url", "image_url": f"{files}/ok.png"}]},
            {"content": [{"type": "image_base64", "image_base64": data_uri(*IMAGES["png"])}]},
            {"content": [{"type": "text", "text": texts[0]}]},
        ],
        model=TINY_CLIP,
    )
    want = np.stack([clip_reference(image("png")), clip_reference(image("png")), clip_reference(texts[0])])
    assert (cosines(by_url.embeddings, want) >= MIN_COSINE).all()


def test_voyage_sdk_a_text_and_an_image_in_one_input_is_a_400_for_clip(voyage, url_client):
    import voyageai

    with pytest.raises(voyageai.error.InvalidRequestError) as refused:
        voyage.multimodal_embed(inputs=[["a caption", image("png")]], model=TINY_CLIP)
    assert refused.value.http_status == 400 and str(refused.value) == TWO_PARTS
    content = [{"type": "text", "text": "a caption"}, {"type": "image_url", "image_url": "http://127.0.0.2:9/x.png"}]
    response = url_client.post("/v1/multimodalembeddings", json={"model": TINY_CLIP, "inputs": [{"content": content}]})
    assert assert_voyage_error(response, 400) == TWO_PARTS


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        pytest.param([], "at least 1 item", id="empty-content"),
        pytest.param([{"type": "video_url", "video_url": "http://x"}], "does not match", id="unknown-type"),
        pytest.param(
            [{"type": "image_url", "image_url": "http://x", "image_base64": "data:,"}], "not permitted", id="both"
        ),
        pytest.param([{"type": "image_base64"}], "required", id="neither"),
    ],
)
def test_bad_voyage_content_is_a_400_in_voyages_shape(url_client, content, fragment):
    response = url_client.post("/v1/multimodalembeddings", json={"model": TINY_CLIP, "inputs": [{"content": content}]})
    message = assert_voyage_error(response, 400)
    assert message.startswith("inputs.0.content") and fragment in message, message


def test_cohere_sdk_v2_one_part_inputs_embed_and_two_parts_are_a_400_for_clip(url_server, clip_reference):
    import cohere

    co = cohere.ClientV2(api_key="unused", base_url=url_server)
    picture = {"type": "image_url", "image_url": {"url": data_uri(*IMAGES["jpeg"])}}
    result = co.embed(
        model=TINY_CLIP,
        input_type="search_document",
        embedding_types=["float"],
        inputs=[{"content": [picture]}, {"content": [{"type": "text", "text": "a fox"}]}],
    )
    want = np.stack([clip_reference(image("jpeg")), clip_reference("a fox")])
    assert (cosines(result.embeddings.float_, want) >= MIN_COSINE).all()
    with pytest.raises(cohere.errors.BadRequestError) as refused:
        co.embed(
            model=TINY_CLIP,
            input_type="search_document",
            embedding_types=["float"],
            inputs=[{"content": [{"type": "text", "text": "a fox"}, picture]}],
        )
    assert refused.value.status_code == 400 and refused.value.body["error"]["message"] == TWO_PARTS
    assert refused.value.body["error"]["param"] == "inputs"


def test_jinas_image_documents_rank_as_the_images_they_hold(url_client, files):
    png, jpeg = data_uri(*IMAGES["png"]), data_uri(*IMAGES["jpeg"])
    plain = url_client.post("/v1/rerank", json={"model": TINY_CLIP, "query": "a fox", "documents": [png, jpeg]})
    assert plain.status_code == 200, plain.text
    body = {
        "model": TINY_CLIP,
        "query": "a fox",
        "documents": [{"image": f"{files}/ok.png"}, {"image": jpeg}],
        "return_documents": True,
    }
    objects = url_client.post("/v1/rerank", json=body)
    assert objects.status_code == 200, objects.text

    def scores(answer: dict) -> list[float]:
        return [r["relevance_score"] for r in sorted(answer["results"], key=lambda r: r["index"])]

    assert_close(scores(objects.json()), scores(plain.json()))
    documents = {r["index"]: r["document"] for r in objects.json()["results"]}
    assert documents == {0: {"image": f"{files}/ok.png"}, 1: {"image": jpeg}}
    both = {"model": TINY_CLIP, "query": "a fox", "documents": [{"text": "a", "image": jpeg}]}
    assert_openai_error(url_client.post("/v1/rerank", json=both), 400, "documents")
