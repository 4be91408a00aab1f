"""Images, audio and page images through the running server: outputs equal a direct transformers
computation, multi-vectors keep their shape, image rerank scores equal MaxSim / cosine, bad media is a 400
for its own request only, and mixed text, image and audio load sees no errors."""

from __future__ import annotations

import asyncio
import base64
import io
from collections import Counter

import httpx
import numpy as np
import pytest

from testkit.media import AUDIO, IMAGES, audio_bytes, bomb_png, data_uri, image_bytes
from tests.asserts import assert_healthy, assert_openai_error
from tests.conftest import MAX_AUDIO_SECONDS, MINILM, TINY_CLAP, TINY_CLIP, TINY_COLMODERNVBERT, TINY_COLPALI
from tests.tolerance import assert_close, assert_same_vectors

pytestmark = pytest.mark.server


def cosine(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def image_uri(name: str) -> str:
    return data_uri(*IMAGES[name])


def audio_uri(name: str) -> str:
    return data_uri(*AUDIO[name])


@pytest.fixture(scope="module")
def clip_reference(tiny_clip_path):
    from PIL import Image
    from transformers import AutoModel, AutoProcessor

    model = AutoModel.from_pretrained(str(tiny_clip_path)).eval()
    processor = AutoProcessor.from_pretrained(str(tiny_clip_path))

    def embed(kind: str, value) -> np.ndarray:
        import torch

        with torch.inference_mode():
            if kind == "text":
                output = model.get_text_features(**processor.tokenizer([value], return_tensors="pt"))
            else:
                image = Image.open(io.BytesIO(value)).convert("RGB")
                output = model.get_image_features(**processor(images=[image], return_tensors="pt"))
        return output.pooler_output[0].numpy()  # transformers 5: the projected vector

    return embed


def test_clip_images_and_text_match_transformers(client, clip_reference):
    names = sorted(IMAGES)
    response = client.post(
        "/v1/embeddings", json={"model": TINY_CLIP, "modality": "image", "input": [image_uri(n) for n in names]}
    )
    assert response.status_code == 200, response.text
    for name, item in zip(names, response.json()["data"]):
        assert cosine(item["embedding"], clip_reference("image", IMAGES[name][0])) >= 0.9999, name
    text = client.post("/v1/embeddings", json={"model": TINY_CLIP, "input": "a photo of a fox"}).json()
    assert cosine(text["data"][0]["embedding"], clip_reference("text", "a photo of a fox")) >= 0.9999


def test_typed_items_mix_modalities_in_one_request(client, clip_reference):
    body = {"model": TINY_CLIP, "input": [{"text": "a fox"}, {"image": image_uri("jpeg")}, "plain text"]}
    data = client.post("/v1/embeddings", json=body).json()["data"]
    assert [d["index"] for d in data] == [0, 1, 2]
    assert cosine(data[0]["embedding"], clip_reference("text", "a fox")) >= 0.9999
    assert cosine(data[1]["embedding"], clip_reference("image", IMAGES["jpeg"][0])) >= 0.9999
    assert cosine(data[2]["embedding"], clip_reference("text", "plain text")) >= 0.9999
    minilm = client.post("/v1/embeddings", json={"model": MINILM, "input": [{"text": "a fox"}]})
    assert minilm.status_code == 200 and len(minilm.json()["data"][0]["embedding"]) == 384


def test_openai_sdk_with_modality_extra(server, clip_reference):
    from openai import OpenAI

    sdk = OpenAI(base_url=f"{server}/v1", api_key="unused")
    result = sdk.embeddings.create(
        model=TINY_CLIP, input=[image_uri("png")], encoding_format="float", extra_body={"modality": "image"}
    )
    assert cosine(result.data[0].embedding, clip_reference("image", IMAGES["png"][0])) >= 0.9999


def test_clap_audio_matches_transformers_after_resampling(client, tiny_clap_path):
    import librosa
    import torch
    from transformers import AutoModel, AutoProcessor

    model = AutoModel.from_pretrained(str(tiny_clap_path)).eval()
    processor = AutoProcessor.from_pretrained(str(tiny_clap_path))
    names = sorted(AUDIO)
    response = client.post(
        "/v1/embeddings", json={"model": TINY_CLAP, "modality": "audio", "input": [audio_uri(n) for n in names]}
    )
    assert response.status_code == 200, response.text
    window = processor.feature_extractor.nb_max_samples
    for name, item in zip(names, response.json()["data"]):
        waveform, _ = librosa.load(io.BytesIO(AUDIO[name][0]), sr=48000, mono=True)
        features = processor.feature_extractor([waveform[:window]], sampling_rate=48000, return_tensors="pt")
        with torch.inference_mode():
            expected = model.get_audio_features(input_features=features["input_features"]).pooler_output[0].numpy()
        assert cosine(item["embedding"], expected) >= 0.9999, name


def test_colpali_keeps_the_multi_vector_shape(client, tiny_colpali_path):
    import torch
    from PIL import Image
    from transformers import AutoProcessor, ColPaliForRetrieval

    model = ColPaliForRetrieval.from_pretrained(str(tiny_colpali_path)).eval()
    processor = AutoProcessor.from_pretrained(str(tiny_colpali_path))
    body = {"model": TINY_COLPALI, "input": [{"image": image_uri("png")}, {"text": "what is the chart about"}]}
    floats = client.post("/v1/embeddings", json=body).json()["data"]
    packed = client.post("/v1/embeddings", json={**body, "encoding_format": "base64"}).json()["data"]
    with torch.inference_mode():
        page = (
            model(**processor(images=[Image.open(io.BytesIO(IMAGES["png"][0])).convert("RGB")], return_tensors="pt"))
            .embeddings[0]
            .numpy()
        )
        query = model(**processor(text=["what is the chart about"], return_tensors="pt")).embeddings[0].numpy()
    for item, base64_item, expected in zip(floats, packed, (page, query)):
        matrix = np.asarray(item["embedding"])
        assert matrix.shape == expected.shape and "shape" not in item
        assert min(cosine(a, b) for a, b in zip(matrix, expected)) >= 0.9999
        assert base64_item["shape"] == list(expected.shape)
        flat = np.frombuffer(base64.b64decode(base64_item["embedding"]), dtype="<f4")
        assert_same_vectors(flat.reshape(base64_item["shape"]), matrix)


def test_colmodernvbert_beside_the_other_kinds_matches_transformers(client, tiny_colmodernvbert_path):
    """ColModernVBERT served with every other kind (in ColPali's model service): its query and page
    multi-vectors, and an image rerank, equal its model card's computation (`process_queries`,
    `process_images`, the model's embeddings where the attention mask is set, `score_retrieval`)."""
    import torch
    from PIL import Image
    from transformers import ColModernVBertForRetrieval, ColModernVBertProcessor

    model = ColModernVBertForRetrieval.from_pretrained(str(tiny_colmodernvbert_path)).eval()
    processor = ColModernVBertProcessor.from_pretrained(str(tiny_colmodernvbert_path))
    query, pages = "what is the chart about", ["png", "large", "grayscale", "tiny"]
    images = [Image.open(io.BytesIO(IMAGES[name][0])).convert("RGB") for name in pages]
    with torch.inference_mode():
        expected = []
        for batch in (processor.process_queries([query]), processor.process_images(images)):
            embeddings = model(**batch).embeddings
            expected += [e[m.bool()] for e, m in zip(embeddings, batch["attention_mask"])]
    scores = processor.score_retrieval(expected[:1], expected[1:]).numpy()[0]
    inputs = [{"text": query}] + [{"image": image_uri(name)} for name in pages]
    response = client.post("/v1/embeddings", json={"model": TINY_COLMODERNVBERT, "input": inputs})
    assert response.status_code == 200, response.text
    for item, want in zip(response.json()["data"], expected):
        matrix = np.asarray(item["embedding"])
        assert matrix.shape == tuple(want.shape)
        assert min(cosine(a, b) for a, b in zip(matrix, want.numpy())) >= 0.9999
    body = {"model": TINY_COLMODERNVBERT, "query": query, "documents": [image_uri(name) for name in pages]}
    ranked = client.post("/v1/rerank", json=body)
    assert ranked.status_code == 200, ranked.text
    got = {r["index"]: r["relevance_score"] for r in ranked.json()["results"]}
    assert_close([got[i] for i in range(len(pages))], scores)
    assert [r["index"] for r in ranked.json()["results"]] == list(np.argsort(-scores, kind="stable"))


def test_infinity_legacy_routes(client, clip_reference):
    image = client.post("/embeddings_image", json={"model": TINY_CLIP, "input": image_uri("rgba")}).json()
    assert cosine(image["data"][0]["embedding"], clip_reference("image", IMAGES["rgba"][0])) >= 0.9999
    audio = client.post("/embeddings_audio", json={"model": TINY_CLAP, "input": [audio_uri("wav-16k-mono")]})
    assert audio.status_code == 200 and len(audio.json()["data"][0]["embedding"]) == 16


def test_image_rerank_maxsim_and_cosine(client):
    pages = ["png", "large", "grayscale", "tiny"]
    query = "what is the chart about"
    documents = [image_uri(p) for p in pages]
    for model in (TINY_COLPALI, TINY_CLIP):
        ranked = client.post("/v1/rerank", json={"model": model, "query": query, "documents": documents}).json()
        vectors = client.post(
            "/v1/embeddings", json={"model": model, "input": [{"text": query}] + [{"image": d} for d in documents]}
        ).json()["data"]
        q, docs = np.asarray(vectors[0]["embedding"]), [np.asarray(v["embedding"]) for v in vectors[1:]]
        expected = [float((q @ d.T).max(axis=1).sum()) if model == TINY_COLPALI else float(q @ d) for d in docs]
        got = {r["index"]: r["relevance_score"] for r in ranked["results"]}
        assert_close([got[i] for i in range(len(pages))], expected)
        assert [r["index"] for r in ranked["results"]] == list(np.argsort(-np.asarray(expected), kind="stable"))


# Bad media a real decoder refuses, and the media models' refusals; the count and input-type checks (65 images,
# token ids to CLIP) are tests/unit/gateway/wire/test_openai.py's, through the engine.
BAD_MEDIA = [
    pytest.param(
        {"model": TINY_CLIP, "modality": "image", "input": ["data:image/png;base64,not*base64"]},
        "input",
        id="corrupt-base64",
    ),
    pytest.param(
        {"model": TINY_CLIP, "modality": "image", "input": [data_uri(b"hello, I am text", "image/png")]},
        "input",
        id="text-labelled-png",
    ),
    pytest.param(
        {"model": TINY_CLIP, "modality": "image", "input": [data_uri(image_bytes(300, 300)[:400], "image/png")]},
        "input",
        id="truncated-png",
    ),
    pytest.param(
        {"model": TINY_CLIP, "modality": "image", "input": [data_uri(image_bytes(1, 1), "image/png")]},
        "input",
        id="one-pixel",
    ),
    pytest.param(
        {"model": TINY_CLIP, "modality": "image", "input": [data_uri(bomb_png(), "image/png")]},
        "input",
        id="decompression-bomb",
    ),
    pytest.param(
        {"model": TINY_CLAP, "modality": "audio", "input": [data_uri(audio_bytes(16000, 0.0), "audio/wav")]},
        "input",
        id="empty-audio",
    ),
    pytest.param(
        {
            "model": TINY_CLAP,
            "modality": "audio",
            "input": [data_uri(audio_bytes(8000, MAX_AUDIO_SECONDS + 1), "audio/wav")],
        },
        "input",
        id="audio-over-the-cap",
    ),
    pytest.param(
        {"model": TINY_CLIP, "modality": "image", "input": ["https://example.com/cat.png"]},
        "input",
        id="url-when-urls-are-off",
    ),
    pytest.param(
        {"model": TINY_CLIP, "modality": "image", "input": ["just a string"]}, "input", id="neither-data-uri-nor-url"
    ),
    pytest.param(
        {"model": TINY_COLPALI, "input": "query", "dimensions": 8}, "dimensions", id="dimensions-on-multi-vector"
    ),
    pytest.param({"model": MINILM, "input": [{"image": image_uri("png")}]}, "model", id="image-to-text-model"),
    pytest.param(
        {"model": TINY_CLAP, "modality": "image", "input": [image_uri("png")]}, "model", id="image-to-audio-model"
    ),
]


@pytest.mark.parametrize(("body", "param"), BAD_MEDIA)
def test_bad_media_is_a_400(client, body, param):
    assert_openai_error(client.post("/v1/embeddings", json=body), 400, param)


def test_rerank_documents_must_be_images_for_image_models(client):
    body = {"model": TINY_COLPALI, "query": "q", "documents": ["plain text, not an image"]}
    assert_openai_error(client.post("/v1/rerank", json=body), 400, "documents")
    assert_healthy(client)


async def _mixed_load(url: str) -> Counter:
    bodies = [
        ("/v1/embeddings", {"model": MINILM, "input": ["a sentence", "another one"]}),
        ("/v1/embeddings", {"model": TINY_CLIP, "modality": "image", "input": [image_uri("png"), image_uri("jpeg")]}),
        ("/v1/embeddings", {"model": TINY_CLIP, "input": "a fox"}),
        ("/v1/embeddings", {"model": TINY_CLAP, "modality": "audio", "input": [audio_uri("wav-44k-stereo")]}),
        ("/v1/embeddings", {"model": TINY_COLPALI, "input": [{"image": image_uri("grayscale")}]}),
        ("/v1/embeddings", {"model": TINY_CLIP, "modality": "image", "input": [data_uri(b"broken", "image/png")]}),
    ]
    statuses: Counter = Counter()
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:

        async def one_client(index: int) -> None:
            for step in range(6):
                path, body = bodies[(index + step) % len(bodies)]
                response = await http.post(path, json=body)
                statuses[(body["input"][0] == data_uri(b"broken", "image/png"), response.status_code)] += 1

        await asyncio.gather(*(one_client(i) for i in range(24)))
    return statuses


def test_mixed_text_image_and_audio_load(server, client):
    statuses = asyncio.run(_mixed_load(server))
    assert statuses == Counter({(False, 200): 120, (True, 400): 24}), statuses
    assert_healthy(client)
