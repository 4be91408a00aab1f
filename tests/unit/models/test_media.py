"""Images, audio and page images as plain Python: decoding limits, the URL address policy, and every
output compared with a direct transformers computation on the same tiny checkpoints and inputs."""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json
import subprocess
import sys
from typing import get_args

import numpy as np
import pytest

from config.errors import InvalidRequest
from config.settings import ModelConfig
from gateway.inputs.fetch import UrlPolicy
from gateway.inputs.media import decode_data_uri
from models.base import Kind
from models.inference.media_encoder import MediaEncoder
from models.kinds import KIND_SPECS, detect_kind
from models.media import MediaLimits, decode_audio, decode_image
from models.scores import late_interaction
from testkit.media import AUDIO, IMAGES, audio_bytes, bomb_png, data_uri, image_bytes
from tests.conftest import ROOT
from tests.tolerance import assert_close, assert_same_vectors

LIMITS = MediaLimits(max_item_bytes=20_000_000, max_image_pixels=40_000_000, max_audio_seconds=5.0)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _encoder(path, kind) -> MediaEncoder:
    return MediaEncoder(
        path, ModelConfig(backend="torch", model_id=str(path), served_model_name=kind, device="cpu"), kind
    )


@pytest.fixture(scope="module")
def clip(tiny_clip_path) -> MediaEncoder:
    return _encoder(tiny_clip_path, "clip")


@pytest.fixture(scope="module")
def clap(tiny_clap_path) -> MediaEncoder:
    return _encoder(tiny_clap_path, "clap")


@pytest.fixture(scope="module")
def colpali(tiny_colpali_path) -> MediaEncoder:
    return _encoder(tiny_colpali_path, "colpali")


def test_media_kinds_are_read_from_the_checkpoint(
    tiny_clip_path, tiny_clap_path, tiny_colpali_path, tiny_colqwen2_path
):
    paths = (tiny_clip_path, tiny_clap_path, tiny_colpali_path, tiny_colqwen2_path)
    assert [detect_kind(p) for p in paths] == ["clip", "clap", "colpali", "colpali"]


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_images_decode_to_rgb(name):
    data, _ = IMAGES[name]
    image = decode_image(data, LIMITS, "input[0]")
    assert image.mode == "RGB" and min(image.size) >= 5


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        pytest.param(b"this is plain text, not a PNG", "not a readable image", id="text-labelled-png"),
        pytest.param(image_bytes(200, 200)[:300], "corrupt or truncated", id="truncated-png"),
        pytest.param(image_bytes(1, 1), "at least 4", id="one-pixel"),
        pytest.param(bomb_png(), "pixels are allowed", id="decompression-bomb"),
        pytest.param(b"", "is empty", id="empty"),
    ],
)
def test_bad_images_are_refused(data, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        decode_image(data, MediaLimits(20_000_000, 40_000_000, 5.0), "input[0]")


def test_bombs_are_refused_from_the_header_before_decoding():
    assert len(bomb_png()) < 200_000  # 64 million pixels in a small file


@pytest.mark.parametrize("name", sorted(AUDIO))
def test_audio_decodes_like_librosa_load(name):
    import librosa

    data, _ = AUDIO[name]
    ours = decode_audio(data, 48000, LIMITS, "input[0]")
    reference, _ = librosa.load(io.BytesIO(data), sr=48000, mono=True)
    assert ours.dtype == np.float32 and ours.shape == reference.shape
    np.testing.assert_allclose(ours, reference, atol=1e-5)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        pytest.param(audio_bytes(16000, 0.0), "no audio samples", id="empty-audio-file"),
        pytest.param(audio_bytes(8000, 6.0), "at most 5 s", id="over-the-duration-cap"),
        pytest.param(b"RIFF garbage that is no wave", "not readable audio", id="garbage"),
        pytest.param(image_bytes(), "not readable audio", id="an-image"),
    ],
)
def test_bad_audio_is_refused(data, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        decode_audio(data, 48000, LIMITS, "input[0]")


def test_data_uris():
    assert decode_data_uri(data_uri(b"abc", "image/png"), 100, "input[0]") == b"abc"
    assert decode_data_uri("data:text/plain,hello%20there", 100, "input[0]") == b"hello there"
    with pytest.raises(InvalidRequest, match="invalid base64"):
        decode_data_uri("data:image/png;base64,@@@@", 100, "input[0]")
    with pytest.raises(InvalidRequest, match="larger than 10 bytes"):
        decode_data_uri(data_uri(b"x" * 100, "image/png"), 10, "input[0]")
    with pytest.raises(InvalidRequest, match="not a valid data URI"):
        decode_data_uri("data:image/png;base64", 100, "input[0]")


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("192.168.0.1", False),
        ("172.16.5.5", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("::1", False),
        ("fd00:ec2::254", False),
        ("fe80::1", False),
        ("224.0.0.1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:8.8.8.8", True),
    ],
)
def test_url_policy_allows_only_public_addresses(address, public):
    policy = UrlPolicy(allow_private=False, allowed_networks=(), timeout_s=1, max_bytes=1)
    assert policy.address_allowed(ipaddress.ip_address(address)) is public
    assert UrlPolicy(True, (), 1, 1).address_allowed(ipaddress.ip_address(address))
    listed = UrlPolicy(False, (ipaddress.ip_network("127.0.0.0/8"),), 1, 1)
    assert listed.address_allowed(ipaddress.ip_address("127.0.0.2"))


def _rows(encoder: MediaEncoder, items):
    return encoder.processor.encode("m", items, LIMITS)


def test_clip_matches_transformers(tiny_clip_path, clip):
    import torch
    from transformers import AutoModel, AutoProcessor

    model = AutoModel.from_pretrained(str(tiny_clip_path)).eval()
    processor = AutoProcessor.from_pretrained(str(tiny_clip_path))
    texts = ["a photo of a fox", "the quick brown fox jumps over the lazy dog"]
    names = sorted(IMAGES)
    outputs = clip.forward(_rows(clip, [("text", t) for t in texts] + [("image", IMAGES[n][0]) for n in names]))
    with torch.inference_mode():
        for text, ours in zip(texts, outputs):
            output = model.get_text_features(**processor.tokenizer([text], return_tensors="pt"))
            expected = output.pooler_output[0].numpy()  # transformers 5: the projected vector
            assert cosine(ours, expected) >= 0.9999 and abs(np.linalg.norm(ours) - 1) < 1e-5
        for name, ours in zip(names, outputs[len(texts) :]):
            image = decode_image(IMAGES[name][0], LIMITS, name)
            output = model.get_image_features(**processor(images=[image], return_tensors="pt"))
            expected = output.pooler_output[0].numpy()
            assert cosine(ours, expected) >= 0.9999, name


def test_clap_matches_transformers_after_resampling(tiny_clap_path, clap):
    import librosa
    import torch
    from transformers import AutoModel, AutoProcessor

    model = AutoModel.from_pretrained(str(tiny_clap_path)).eval()
    processor = AutoProcessor.from_pretrained(str(tiny_clap_path))
    names = sorted(AUDIO)
    outputs = clap.forward(_rows(clap, [("audio", AUDIO[n][0]) for n in names] + [("text", "birds singing")]))
    window = processor.feature_extractor.nb_max_samples
    with torch.inference_mode():
        for name, ours in zip(names, outputs):
            waveform, _ = librosa.load(io.BytesIO(AUDIO[name][0]), sr=48000, mono=True)
            features = processor.feature_extractor([waveform[:window]], sampling_rate=48000, return_tensors="pt")
            output = model.get_audio_features(input_features=features["input_features"])
            expected = output.pooler_output[0].numpy()  # transformers 5: the projected vector
            assert cosine(ours, expected) >= 0.9999, name
        output = model.get_text_features(**processor.tokenizer(["birds singing"], return_tensors="pt"))
        text = output.pooler_output[0].numpy()
        assert cosine(outputs[-1], text) >= 0.9999


def test_long_audio_embeds_the_same_every_time(clap):
    first, second = (clap.forward(_rows(clap, [("audio", AUDIO["long-wav-16k"][0])]))[0] for _ in range(2))
    np.testing.assert_array_equal(first, second)


def test_colpali_multi_vectors_and_maxsim_match_transformers(tiny_colpali_path, colpali):
    import torch
    from transformers import AutoProcessor, ColPaliForRetrieval

    model = ColPaliForRetrieval.from_pretrained(str(tiny_colpali_path)).eval()
    processor = AutoProcessor.from_pretrained(str(tiny_colpali_path))
    queries = ["what is the chart about", "fox"]
    pages = [IMAGES["png"][0], IMAGES["large"][0], IMAGES["grayscale"][0]]
    outputs = colpali.forward(_rows(colpali, [("text", q) for q in queries] + [("image", p) for p in pages]))
    with torch.inference_mode():
        expected_queries = [model(**processor(text=[q], return_tensors="pt")).embeddings[0] for q in queries]
        images = [decode_image(p, LIMITS, "page") for p in pages]
        expected_pages = [model(**processor(images=[i], return_tensors="pt")).embeddings[0] for i in images]
    for ours, expected in zip(outputs, expected_queries + expected_pages):
        assert ours.shape == tuple(expected.shape) and ours.shape[1] == colpali.info.dimension
        for row, want in zip(ours, expected.numpy()):
            assert cosine(row, want) >= 0.9999
    scores = processor.score_retrieval(expected_queries, expected_pages).numpy()
    ours = [[late_interaction(q, p) for p in outputs[2:]] for q in outputs[:2]]
    assert_close(ours, scores)


@pytest.mark.parametrize("checkpoint", ["tiny_colqwen2_path", "tiny_colqwen2_5_path"])
def test_colqwen2_pages_of_different_sizes_match_transformers(checkpoint, request):
    """ColQwen2 (on Qwen2-VL, and on Qwen2.5-VL as ColQwen2.5 is) turns each image into its own number of
    patches; rows of different lengths share a pass."""
    import torch
    from transformers import AutoProcessor, ColQwen2ForRetrieval

    tiny_colqwen2_path = request.getfixturevalue(checkpoint)
    assert detect_kind(tiny_colqwen2_path) == "colpali"
    encoder = _encoder(tiny_colqwen2_path, "colpali")
    items = [
        ("image", IMAGES["png"][0]),
        ("image", IMAGES["large"][0]),
        ("text", "what chart"),
        ("image", IMAGES["tiny"][0]),
    ]
    rows = _rows(encoder, items)
    assert len({row.arrays["pixel_values"].shape for row in rows if row.modality == "image"}) == 2
    outputs = encoder.forward(rows)
    model = ColQwen2ForRetrieval.from_pretrained(str(tiny_colqwen2_path)).eval()
    processor = AutoProcessor.from_pretrained(str(tiny_colqwen2_path))
    with torch.inference_mode():
        for (modality, value), ours in zip(items, outputs):
            inputs = (
                processor(images=[decode_image(value, LIMITS, "page")], return_tensors="pt")
                if modality == "image"
                else processor(text=[value], return_tensors="pt")
            )
            expected = model(**inputs).embeddings[0].numpy()
            assert ours.shape == expected.shape
            assert min(cosine(a, b) for a, b in zip(ours, expected)) >= 0.9999


def test_a_row_that_fails_inside_the_model_fails_alone(tiny_clip_path, clip):
    """Rows of several requests share a pass; one with broken pixels fails, the others are exact."""
    from runners.pool import ModelPool

    pool = ModelPool(
        lambda folder, cfg: clip, [ModelConfig(backend="torch", model_id=str(tiny_clip_path), served_model_name="m")]
    )
    good = _rows(clip, [("image", IMAGES["png"][0]), ("text", "a fox"), ("image", IMAGES["jpeg"][0])])
    broken = good[0].model_copy(update={"arrays": {"pixel_values": np.zeros((3, 7, 7), dtype=np.float32)}})
    outputs = asyncio.run(pool.run([good[0], broken, good[1], good[2]]))
    assert outputs[1].size == 0
    for ours, expected in zip([outputs[0], outputs[2], outputs[3]], clip.forward(good)):
        assert_same_vectors(ours, expected)


# Each (kind, folder) prepared as the gateway prepares it, in a process where transformers sees no torch:
# transformers 5 no longer reads USE_TORCH, and a None in sys.modules is what makes its find_spec("torch") fail.
PREPARE_WITHOUT_TORCH = """
import json, sys
sys.modules["torch"] = None
from pathlib import Path
from config.settings import ModelConfig
from models.preprocessing.media_processor import MediaProcessor
from models.preprocessing.text_tokenizer import TextTokenizer
outcomes = []
for kind, folder in json.loads(sys.argv[1]):
    cfg = ModelConfig(backend="torch", model_id=folder)
    try:
        if kind in ("clip", "clap", "colpali"):
            MediaProcessor(Path(folder), cfg, kind).warmup_rows("m")
        else:
            TextTokenizer(Path(folder), cfg, kind).encode_texts(["warm-up"])
        outcomes.append("prepared")
    except Exception as exc:
        outcomes.append(f"failed: {exc}")
from transformers.utils import is_torch_available
seen = sys.modules.get("torch") is not None or is_torch_available()
print(json.dumps({"outcomes": outcomes, "torch imported": seen}))
"""


def test_the_kinds_declared_to_need_torch_in_the_gateway_are_those_that_fail_without_it(
    tiny_bert_path, tiny_clip_path, tiny_clap_path, tiny_colpali_path, tiny_colqwen2_path
):
    assert set(KIND_SPECS) == set(get_args(Kind))
    cases = [
        ("embed", tiny_bert_path),
        ("clip", tiny_clip_path),
        ("clap", tiny_clap_path),
        ("colpali", tiny_colpali_path),
        ("colpali", tiny_colqwen2_path),
    ]
    result = subprocess.run(
        [sys.executable, "-c", PREPARE_WITHOUT_TORCH, json.dumps([(kind, str(path)) for kind, path in cases])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["torch imported"]
    for (kind, _), outcome in zip(cases, report["outcomes"]):
        assert outcome.startswith("failed") == KIND_SPECS[kind].gateway_needs_torch, (kind, outcome)
        assert outcome == "prepared" or "PyTorch" in outcome, (kind, outcome)
