"""`backend: auto`: ONNX Runtime on CPU for the kinds it runs when the export exists and matches torch, torch
otherwise; the export's cache key and its recorded verdict."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from config.settings import ModelConfig
from models.base import TokenizedText
from models.inference import auto_backend, onnx_export
from models.inference.auto_backend import compare, load_model
from models.inference.onnx_export import ExportKey, checkpoint_revision, export_key, onnx_entry
from models.preprocessing.text_tokenizer import TextTokenizer
from testkit.checkpoints import build_lfs_pointer_export, build_stale_export, build_tiny_ernie
from testkit.sentences import make_sentences
from tests.tolerance import cosines

pytestmark = pytest.mark.usefixtures("cache_dir")


def _outputs(model, path, cfg: ModelConfig, texts: list[str]) -> np.ndarray:
    tokenizer = TextTokenizer(path, cfg, model.info.kind)
    if model.info.spec.output == "scores":
        ids, segments = tokenizer.encode_pair_list(texts, list(reversed(texts)))
        return np.stack(model.forward(TokenizedText.rows("m", ids, segments)))
    return np.stack(model.forward(TokenizedText.rows("m", tokenizer.encode_texts(texts))))


@pytest.fixture
def ernie_path(tmp_path, minilm_path):
    return build_tiny_ernie(tmp_path / "ernie", minilm_path)


@pytest.mark.parametrize(
    "checkpoint",
    [
        "minilm_path",
        "tiny_bert_path",
        "tiny_reranker_path",
        "tiny_classifier_path",
        "ernie_path",
        "qwen3_embedder_path",
    ],
)
def test_auto_serves_onnx_where_it_matches_torch(request, checkpoint):
    """Encoders, scorers, a model type optimum had no exporter for (ERNIE), and a decoder embedder, left padded
    (Qwen3: positions are computed in the graph, as transformers computes them)."""
    path = request.getfixturevalue(checkpoint)
    auto = ModelConfig(model_id=str(path), device="cpu")
    model = load_model(path, auto)
    assert model.info.backend == "onnx", model.info.backend_reason
    assert model.info.backend_reason.startswith("onnx: its export matches torch")
    reference = load_model(path, auto.model_copy(update={"backend": "torch"}))
    assert reference.info.backend_reason == "configured"
    texts = make_sentences(10, seed=3)
    ours, theirs = _outputs(model, path, auto, texts), _outputs(reference, path, auto, texts)
    if model.info.spec.output == "scores":
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    else:
        assert cosines(ours, theirs).min() >= 0.99999


def test_auto_keeps_torch_for_kinds_onnx_runtime_does_not_run(tiny_clip_path, splade_path, qwen3_reranker_path):
    for path, fragment in (
        (tiny_clip_path, "does not run clip models"),
        (splade_path, "does not run sparse models"),
        (qwen3_reranker_path, "causal-LM reranker"),
    ):
        model = load_model(path, ModelConfig(model_id=str(path), device="cpu"))
        assert model.info.backend == "torch" and fragment in model.info.backend_reason, model.info.backend_reason


def test_auto_keeps_torch_for_half_precision(tiny_bert_path):
    model = load_model(tiny_bert_path, ModelConfig(model_id=str(tiny_bert_path), device="cpu", dtype="bfloat16"))
    assert (model.info.backend, model.info.dtype) == ("torch", "bfloat16")
    assert "dtype bfloat16" in model.info.backend_reason


def test_auto_keeps_torch_for_weights_past_one_onnx_files_limit(tiny_bert_path, monkeypatch):
    monkeypatch.setattr(auto_backend, "MAX_WEIGHT_BYTES", 1000)  # the tiny BERT passes it, as 7B weights pass 2 GiB
    model = load_model(tiny_bert_path, ModelConfig(model_id=str(tiny_bert_path), device="cpu"))
    assert model.info.backend == "torch" and "weights pass 2 GiB" in model.info.backend_reason


def test_an_export_that_cannot_run_falls_back_to_torch_once(tmp_path, minilm_path, monkeypatch):
    from models.inference import onnx_runtime

    pointer = build_lfs_pointer_export(tmp_path / "pointer", minilm_path)
    cfg = ModelConfig(model_id=str(pointer), device="cpu")
    model = load_model(pointer, cfg)
    assert model.info.backend == "torch"
    assert "ONNX Runtime cannot run it" in model.info.backend_reason and "cannot open" in model.info.backend_reason

    def no_second_try(*args, **kwargs):
        raise AssertionError("the failed session was recorded; it is not tried again")

    monkeypatch.setattr(onnx_runtime, "attach_session", no_second_try)
    again = load_model(pointer, cfg)
    assert again.info.backend == "torch" and again.info.backend_reason == model.info.backend_reason


def test_an_export_that_does_not_match_falls_back_to_torch(tmp_path, minilm_path, monkeypatch):
    stale = build_stale_export(tmp_path / "stale", minilm_path)
    cfg = ModelConfig(model_id=str(stale), device="cpu")
    model = load_model(stale, cfg)
    assert model.info.backend == "torch"
    assert "does not match torch (min cosine" in model.info.backend_reason
    explicit = load_model(stale, cfg.model_copy(update={"backend": "onnx"}))  # an explicit backend always wins
    assert explicit.info.backend == "onnx"
    texts = make_sentences(4, seed=5)
    assert cosines(_outputs(explicit, stale, cfg, texts), _outputs(model, stale, cfg, texts)).min() < 0.999


def test_the_verdict_is_taken_once_per_export(tiny_bert_path, monkeypatch):
    cfg = ModelConfig(model_id=str(tiny_bert_path), device="cpu")
    first = load_model(tiny_bert_path, cfg)
    entry = onnx_entry(tiny_bert_path, "feature-extraction")
    assert (entry / auto_backend.VERDICT_FILE).is_file() and (entry / onnx_export.KEY_FILE).is_file()
    assert not [path.name for path in entry.iterdir() if path.name.startswith(".")]  # no draft or scratch left

    def no_second_check(*args, **kwargs):
        raise AssertionError("the recorded verdict is read, not taken again")

    monkeypatch.setattr(auto_backend, "compare", no_second_check)
    monkeypatch.setattr(onnx_export, "_export", no_second_check)
    again = load_model(tiny_bert_path, cfg)
    assert (again.info.backend, again.info.backend_reason) == (first.info.backend, first.info.backend_reason)


def test_the_cache_key_changes_with_each_of_its_parts(tiny_bert_path, tmp_path, monkeypatch):
    key = export_key(tiny_bert_path, "feature-extraction")
    for part in ("revision", "task", "transformers", "onnxruntime", "torch", "onnxscript", "optimization"):
        changed = dataclasses.replace(key, **{part: getattr(key, part) + "-other"})
        assert changed.digest != key.digest, part
    versions = {"transformers": "9.9", "onnxruntime": "9.8", "torch": "9.7", "onnxscript": "9.6"}
    monkeypatch.setattr(onnx_export, "_version", lambda package: versions[package])
    assert export_key(tiny_bert_path, "feature-extraction") == ExportKey(
        key.revision, "feature-extraction", "9.9", "9.8", "9.7", "9.6", "all"
    )
    assert onnx_entry(tiny_bert_path, "feature-extraction") != onnx_entry(tiny_bert_path, "sequence-classification")


def test_the_revision_is_the_checkpoints_content(tiny_bert_path, tmp_path):
    copy = shutil.copytree(tiny_bert_path, tmp_path / "elsewhere" / "copy")  # another place and other times
    assert checkpoint_revision(copy) == checkpoint_revision(tiny_bert_path)
    (copy / "config.json").write_text((copy / "config.json").read_text().replace('"hidden_act"', '"hidden_act" '))
    assert checkpoint_revision(copy) != checkpoint_revision(tiny_bert_path)
    snapshot = shutil.copytree(tiny_bert_path, tmp_path / "models--a--b" / "snapshots" / "0123abcd")
    assert checkpoint_revision(snapshot) == "hub-0123abcd"


def test_weights_change_the_revision_where_they_are_sampled(tmp_path, monkeypatch):
    """A large weight file is sampled, not read whole: a change inside a sampled block names a new entry."""
    folder = tmp_path / "large"
    folder.mkdir()
    weights = np.random.default_rng(0).bytes(12 << 20)
    (folder / "model.safetensors").write_bytes(weights)
    before = checkpoint_revision(folder)
    changed = bytearray(weights)
    changed[-10] ^= 0xFF  # the last MiB is read whole
    (folder / "model.safetensors").write_bytes(bytes(changed))
    assert checkpoint_revision(folder) != before


def test_compare_holds_vectors_and_scores_to_their_thresholds():
    reference = np.random.default_rng(0).normal(size=(4, 8))
    assert compare(reference * 1.5, reference, scores=False).matches  # cosine ignores scale
    assert not compare(reference + 0.05, reference, scores=False).matches
    logits = np.array([[12.0], [-0.2], [3.0]])
    assert compare(logits * (1 + 5e-5), logits, scores=True).matches
    assert not compare(logits + np.array([[0.0], [2e-4], [0.0]]), logits, scores=True).matches
    assert not compare(reference[:, :4], reference, scores=False).matches
