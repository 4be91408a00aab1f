"""Issue 50, in process: the served computation of a tiny Qwen3-VL-Embedding (its tokenizer, chat template and PIL
image processor, no torchvision; models/preprocessing/vl_processor.py) equals sentence-transformers 6's
(`SentenceTransformer.encode`, computed in the Qwen3-VL reference venv) for a text, an image, and a text with an
image as one input, alone and batched together; detection reads the checkpoint's files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from config.errors import ConfigError, InvalidRequest
from config.settings import ModelConfig
from models.kinds import detect_kind, spec
from models.media import MediaLimits
from testkit.vl_checkpoints import QUERY_PROMPT
from tests.vl_reference import MIXED_TEXT, TEXT

LIMITS = MediaLimits(max_item_bytes=1 << 20, max_image_pixels=1 << 20, max_audio_seconds=30)


@pytest.fixture(scope="module")
def encoder(vl_reference):  # -> VisionLanguageEncoder
    from models.inference.vl_encoder import VisionLanguageEncoder

    folder = vl_reference.folder
    return VisionLanguageEncoder(folder, ModelConfig(model_id=str(folder)), detect_kind(folder))


def _inputs(vl_reference) -> list[tuple]:
    images = vl_reference.images
    return [(("text", TEXT),), (("image", images["wide"]),), (("text", MIXED_TEXT), ("image", images["small"]))]


def _cosines(vectors: np.ndarray, expected: np.ndarray) -> np.ndarray:
    return (vectors * expected).sum(1) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(expected, axis=1))


def test_detected_as_a_vision_language_embedder(vl_reference) -> None:
    assert detect_kind(vl_reference.folder) == "vl-embed"
    assert spec("vl-embed").mixed_inputs and spec("vl-embed").modalities == ("text", "image")


def test_without_pooling_modules_it_is_not_one(vl_reference, tmp_path: Path) -> None:
    """A vision-language checkpoint without sentence-transformers' pooling is refused with the reason, not served."""
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(vl_reference.folder / "config.json", bare / "config.json")
    shutil.copy(vl_reference.folder / "sentence_bert_config.json", bare / "sentence_bert_config.json")
    (bare / "modules.json").write_text(json.dumps([json.loads((vl_reference.folder / "modules.json").read_text())[0]]))
    with pytest.raises(ConfigError, match="cannot tell which kind"):
        detect_kind(bare)


def test_each_input_shape_matches_sentence_transformers(encoder, vl_reference) -> None:
    expected = np.stack([vl_reference.text, vl_reference.image, vl_reference.mixed])
    rows = encoder.processor.encode("vl", _inputs(vl_reference), LIMITS)
    alone = np.stack([encoder.forward([row])[0] for row in rows])
    together = np.stack(encoder.forward(rows))  # one batch: left-padded texts and both images' patches
    assert (_cosines(alone, expected) >= 0.9999).all(), _cosines(alone, expected)
    assert (_cosines(together, expected) >= 0.9999).all(), _cosines(together, expected)


def test_row_lengths_count_the_visual_tokens(encoder, vl_reference) -> None:
    """The batcher's token budget sees each image's tokens (its grid's patches / merge²) in the row's length."""
    text, image, mixed = encoder.processor.encode("vl", _inputs(vl_reference), LIMITS)
    grid = image.arrays["image_grid_thw"][0]
    image_tokens = int(np.prod(grid)) // 4  # merge size 2
    assert int((image.arrays["input_ids"] == encoder.processor._image_token_id).sum()) == image_tokens
    assert image.length == len(image.arrays["input_ids"]) > image_tokens
    assert mixed.length > text.length


def test_a_corrupt_image_is_a_400_naming_it(encoder, vl_reference) -> None:
    broken = vl_reference.images["wide"][:60]
    with pytest.raises(InvalidRequest, match=r"input\[1\]"):
        encoder.processor.encode("vl", [(("text", TEXT),), (("image", broken),)], LIMITS)


def test_the_pixel_limit_applies_before_decoding(encoder, vl_reference) -> None:
    small = MediaLimits(max_item_bytes=1 << 20, max_image_pixels=64 * 64, max_audio_seconds=30)
    with pytest.raises(InvalidRequest, match="pixels"):
        encoder.processor.encode("vl", [(("image", vl_reference.images["wide"]),)], small)


def test_a_prompt_is_the_system_message(encoder, vl_reference) -> None:
    """The "query" prompt, asked for by name, by Cohere's input_type or as the request's own instruction, frames the
    input as sentence-transformers' `encode(prompt_name="query")` does: its system message."""
    processor = encoder.processor
    assert processor.prompt("query") == processor.prompt(None, None, "search_query") == QUERY_PROMPT
    assert processor.prompt(None, QUERY_PROMPT) == QUERY_PROMPT
    assert processor.prompt(None, None, "search_document") == processor.prompt(None) == ""  # the template's own
    with pytest.raises(InvalidRequest, match="unknown prompt_name"):
        processor.prompt("passage")
    (row,) = processor.encode("vl", [(("text", TEXT),)], LIMITS, QUERY_PROMPT)
    got = np.stack(encoder.forward([row]))
    assert _cosines(got, vl_reference.query[None])[0] >= 0.9999
    assert _cosines(got, vl_reference.text[None])[0] < 0.999  # the prompt changed the vector
