"""Issue 50's families beside each other in one server (the dtype matrix's too: tests/servers.py): a tiny
Qwen3-VL-Embedding, a tiny Qwen3-VL-Reranker, an embedder with two task adapters, and a tiny ColModernVBERT. Each is
also served elsewhere (alone in test_vl_embed.py, test_vl_rerank.py and test_kinds.py; the adapters in
test_task_adapters.py); here the three clients' SDKs reach them side by side:

- OpenAI's SDK: a text, an image, and a text with an image as one input to the Qwen3-VL embedder; the same texts
  under two tasks give two different vectors, each its adapter's; ColModernVBERT's page matrix beside them.
- voyageai's `multimodal_embed`: the same three input shapes (PIL images, which the SDK sends as lossless WebP).
- Cohere's `ClientV2.embed`: `inputs[].content` of one part and of a text with an image.
- Cohere's `ClientV2.rerank`: the VL reranker scores a text and an image (data URI) document. (voyageai's `rerank`
  posts to the same /v1/rerank and reads Voyage's `data` where Cohere's and Jina's clients read `results`: not served.)
Each vector (and score) equals the model card's own computation: sentence-transformers 6 in the reference venv for
Qwen3-VL (its `CrossEncoder.predict` for the reranker), the adapter merged by peft for tasks, transformers'
ColModernVBERT."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from testkit.media import data_uri
from testkit.sentences import make_sentences
from tests.adapter_reference import adapter_vectors
from tests.servers import NEW_PAGES, NEW_TASKS, NEW_VL, NEW_VL_RERANK, SharedServer
from tests.tolerance import assert_close, cosines
from tests.vl_reference import MIXED_TEXT, RERANK_QUERY, RERANK_TEXT, TEXT

pytestmark = pytest.mark.server

MIN_COSINE = 0.9999
VL, TASKS, PAGES, RERANK = NEW_VL, NEW_TASKS, NEW_PAGES, NEW_VL_RERANK
TASK_TEXTS = make_sentences()[:3]


@pytest.fixture(scope="module")
def server(kinds_and_dtypes_server: SharedServer) -> str:
    """The four by the names above, beside the dtype matrix's models (tests/servers.py)."""
    return kinds_and_dtypes_server.url


def png(data: bytes) -> str:
    return data_uri(data, "image/png")


def picture(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


def expected_vl(vl_reference) -> np.ndarray:
    return np.stack([vl_reference.text, vl_reference.image, vl_reference.mixed])


def test_openai_sdk_reaches_each_family(server, vl_reference, task_adapter_path, tiny_colmodernvbert_path):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server}/v1", api_key="unused")
    images = vl_reference.images
    items = [{"text": TEXT}, {"image": png(images["wide"])}, {"text": MIXED_TEXT, "image": png(images["small"])}]
    answer = client.embeddings.create(model=VL, input=items)  # type: ignore[arg-type]  # Embento's typed items
    assert (cosines([d.embedding for d in answer.data], expected_vl(vl_reference)) >= MIN_COSINE).all()

    by_task = {}
    for task in ("retrieval", "text-matching"):
        answer = client.embeddings.create(model=TASKS, input=TASK_TEXTS, extra_body={"task": task})
        by_task[task] = np.array([d.embedding for d in answer.data])
        want = adapter_vectors(task_adapter_path, task, TASK_TEXTS)
        assert (cosines(by_task[task], want) >= MIN_COSINE).all()
    assert (cosines(by_task["retrieval"], by_task["text-matching"]) < 0.99).all()  # two tasks, two vectors

    # The SDK asks for base64 and decodes it flat: a page's matrix comes back as its rows laid end to end.
    page = client.embeddings.create(model=PAGES, input=[{"image": png(images["wide"])}])  # type: ignore[list-item]
    want = colmodernvbert_page(tiny_colmodernvbert_path, images["wide"])
    assert (cosines(np.asarray(page.data[0].embedding).reshape(want.shape), want) >= MIN_COSINE).all()


def colmodernvbert_page(folder: Path, image: bytes) -> np.ndarray:
    """transformers' ColModernVBERT: a page's vectors where its processor's attention mask is set."""
    import torch
    from transformers import ColModernVBertForRetrieval, ColModernVBertProcessor

    model = ColModernVBertForRetrieval.from_pretrained(str(folder)).eval()
    processor = ColModernVBertProcessor.from_pretrained(str(folder))
    with torch.inference_mode():
        batch = processor.process_images([picture(image).convert("RGB")])
        embeddings = model(**batch).embeddings[0]
    return embeddings[batch["attention_mask"][0].bool()].numpy()


def test_voyage_sdk_multimodal_embed_takes_the_three_shapes(server, vl_reference):
    import voyageai

    voyage = voyageai.Client(api_key="unused", base_url=f"{server}/v1", max_retries=0)
    images = vl_reference.images
    inputs = [[TEXT], [picture(images["wide"])], [MIXED_TEXT, picture(images["small"])]]
    result = voyage.multimodal_embed(inputs=inputs, model=VL)  # type: ignore[arg-type]
    assert (cosines(result.embeddings, expected_vl(vl_reference)) >= MIN_COSINE).all()
    assert result.total_tokens > 0


def test_cohere_sdk_v2_content_of_one_and_two_parts(server, vl_reference):
    import cohere

    co = cohere.ClientV2(api_key="unused", base_url=server)
    images = vl_reference.images
    image_part = {"type": "image_url", "image_url": {"url": png(images["wide"])}}
    mixed = [{"type": "text", "text": MIXED_TEXT}, {"type": "image_url", "image_url": {"url": png(images["small"])}}]
    result = co.embed(
        model=VL,
        input_type="search_document",
        embedding_types=["float"],
        inputs=[{"content": [{"type": "text", "text": TEXT}]}, {"content": [image_part]}, {"content": mixed}],
    )
    assert (cosines(result.embeddings.float_, expected_vl(vl_reference)) >= MIN_COSINE).all()


def test_cohere_sdk_reranks_a_text_and_an_image(server, vl_rerank_reference):
    import cohere

    documents = [RERANK_TEXT, png(vl_rerank_reference.images["wide"])]
    expected = vl_rerank_reference.scores[:2, 0]
    ranked = cohere.ClientV2(api_key="unused", base_url=server).rerank(
        model=RERANK, query=RERANK_QUERY, documents=documents
    )
    cohere_scores = {r.index: r.relevance_score for r in ranked.results}
    assert_close([cohere_scores[0], cohere_scores[1]], expected, rtol=1e-4)
