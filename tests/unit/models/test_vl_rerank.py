"""Issue 50, in process: the served computation of a tiny Qwen3-VL-Reranker (its tokenizer, chat template and PIL
image processor, no torchvision; the VLM's "yes" minus "no" logit at the last position) equals
sentence-transformers 6's `CrossEncoder.predict` (computed in the Qwen3-VL reference venv) for a text document, an
image document and a text with an image, alone and batched together, and under an instruction; detection reads the
checkpoint's modules.

Scores are compared activated (what `predict` returns, and the routes answer) within 1e-4 relative. The raw logits
of image documents differ from the card's by about 1e-5: its processor resizes with torchvision, the served one
with PIL, and pixels differ by at most one grey level (measured: 2/255 in the normalized range)."""

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
from models.scores import activate
from tests.tolerance import assert_close
from tests.vl_reference import MIXED_TEXT, RERANK_INSTRUCTION, RERANK_QUERY, RERANK_TEXT

LIMITS = MediaLimits(max_item_bytes=1 << 20, max_image_pixels=1 << 20, max_audio_seconds=30)
SCORE_RTOL = 1e-4
LOGIT_ATOL = 1e-4  # raw logits of image documents: the resizes above


@pytest.fixture(scope="module")
def scorer(vl_rerank_reference):  # -> VisionLanguageScorer
    from models.inference.vl_scorer import VisionLanguageScorer

    folder = vl_rerank_reference.folder
    return VisionLanguageScorer(folder, ModelConfig(model_id=str(folder)), detect_kind(folder))


def _documents(reference) -> list[tuple]:
    images = reference.images
    return [(("text", RERANK_TEXT),), (("image", images["wide"]),), (("text", MIXED_TEXT), ("image", images["small"]))]


def _scores(scorer, rows) -> np.ndarray:
    return np.stack(scorer.forward(rows))[:, 0]


def test_detected_as_a_vision_language_reranker(vl_rerank_reference) -> None:
    assert detect_kind(vl_rerank_reference.folder) == "vl-rerank"
    assert spec("vl-rerank").rank_by == "multimodal-pair-logits" and spec("vl-rerank").scores_pairs


def test_without_its_logit_score_module_it_is_refused(vl_rerank_reference, tmp_path: Path) -> None:
    """A VLM CrossEncoder folder whose modules stop at the Transformer cannot be told: refused with the reason."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
        shutil.copy(vl_rerank_reference.folder / name, bare / name)
    modules = json.loads((vl_rerank_reference.folder / "modules.json").read_text())
    (bare / "modules.json").write_text(json.dumps(modules[:1]))
    with pytest.raises(ConfigError, match="cannot tell which kind"):
        detect_kind(bare)


def test_each_document_shape_matches_the_cross_encoder(scorer, vl_rerank_reference) -> None:
    rows = scorer.processor.pair_rows("vl", RERANK_QUERY, _documents(vl_rerank_reference), None, LIMITS)
    alone = np.array([_scores(scorer, [row])[0] for row in rows])
    together = _scores(scorer, rows)  # one batch, left-padded: texts and both images' patches
    expected = vl_rerank_reference.scores
    for got in (alone, together):
        assert_close(activate(got[:, None], scorer.info.activation)[:, 0], expected[:, 0], rtol=SCORE_RTOL)
        np.testing.assert_allclose(got, expected[:, 1], rtol=0, atol=LOGIT_ATOL)
    assert scorer.info.activation == "sigmoid"  # the CrossEncoder's saved activation_fn


def test_an_instruction_is_the_system_message(scorer, vl_rerank_reference) -> None:
    documents = _documents(vl_rerank_reference)[:1]
    (row,) = scorer.processor.pair_rows("vl", RERANK_QUERY, documents, RERANK_INSTRUCTION, LIMITS)
    got = _scores(scorer, [row])
    activated, raw = vl_rerank_reference.instructed
    assert_close(activate(got[:, None], "sigmoid")[:, 0], [activated], rtol=SCORE_RTOL)
    assert abs(raw - vl_rerank_reference.scores[0, 1]) > 10 * LOGIT_ATOL  # the instruction changed the score


def test_a_corrupt_image_document_is_a_400_naming_it(scorer, vl_rerank_reference) -> None:
    broken = vl_rerank_reference.images["wide"][:60]
    documents = [(("text", RERANK_TEXT),), (("image", broken),)]
    with pytest.raises(InvalidRequest, match=r"documents\[1\]"):
        scorer.processor.pair_rows("vl", RERANK_QUERY, documents, None, LIMITS)


def test_another_image_processor_is_not_framed_as_qwen_vls(vl_rerank_reference, tmp_path: Path) -> None:
    """The same folder declaring another family's image processor (EmbeddingGemma-2's, say) is refused, not run
    through Qwen-VL's patches and placeholders."""
    other = tmp_path / "other"
    shutil.copytree(vl_rerank_reference.folder, other)
    for name in ("preprocessor_config.json", "processor_config.json"):
        settings = json.loads((other / name).read_text())
        (settings.get("image_processor") or settings)["image_processor_type"] = "SiglipImageProcessor"
        (other / name).write_text(json.dumps(settings))
    with pytest.raises(ConfigError, match="cannot tell which kind"):
        detect_kind(other)
