"""The torch-free ONNX Runtime classes of rerankers, classifiers (`models.inference.onnx_scorer`) and ColBERT models
(`models.inference.onnx_colbert`) against the torch-backed classes on the same export: the same logits, bit for
bit, and the same info; the same ColBERT vectors (cosine >= 0.99999: the projection runs in numpy, not torch)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.base import TokenizedText
from models.inference.auto_backend import MIN_COSINE, load_model, load_torch_free, parity_rows
from models.inference.colbert_encoder import ColbertEncoder
from models.inference.onnx_colbert import OnnxColbertEncoder
from models.inference.onnx_export import exported_checkpoint
from models.inference.onnx_scorer import OnnxTextScorer
from models.inference.sentence_head import TorchNeeded
from models.inference.text_scorer import TextScorer
from models.preprocessing.text_tokenizer import TextTokenizer
from tests.hybrid_reference import DOCUMENTS, QUERIES
from tests.tolerance import assert_close, assert_same_vectors

SCORES = "sequence-classification"


def on_onnx(folder: Path, **settings) -> ModelConfig:
    return ModelConfig(model_id=str(folder), backend="onnx", device="cpu", **settings)


@pytest.fixture(params=["tiny_reranker_path", "tiny_classifier_path", "minilm_reranker_path", "minilm_classifier_path"])
def scorer_folder(request) -> tuple[Path, str]:
    """(folder, kind): plain transformers checkpoints and CrossEncoder folders, one label and three."""
    return request.getfixturevalue(request.param), "rerank" if "reranker" in request.param else "classify"


def test_scores_equal_the_torch_backed_class_bit_for_bit(scorer_folder):
    folder, kind = scorer_folder
    exported_checkpoint(folder, SCORES)
    torch_free, reference = OnnxTextScorer(folder, on_onnx(folder), kind), TextScorer(folder, on_onnx(folder), kind)
    assert torch_free.info == reference.info
    rows = parity_rows(folder, on_onnx(folder), kind)  # pairs for a reranker, single texts for a classifier
    assert np.array_equal(torch_free.forward(rows), reference.forward(rows))
    on_torch = TextScorer(folder, ModelConfig(model_id=str(folder), backend="torch", device="cpu"), kind)
    assert_close(torch_free.forward(rows), on_torch.forward(rows), rtol=1e-4)


def test_the_int8_export_scores_as_the_torch_backed_class(tiny_reranker_path):
    folder = tiny_reranker_path
    exported_checkpoint(folder, SCORES)
    cfg = on_onnx(folder, dtype="int8")
    torch_free, reference = OnnxTextScorer(folder, cfg, "rerank"), TextScorer(folder, cfg, "rerank")
    assert torch_free.info == reference.info and torch_free.info.dtype == "int8"
    rows = parity_rows(folder, cfg, "rerank")
    assert np.array_equal(torch_free.forward(rows), reference.forward(rows))


def test_a_declared_activation_and_window_are_read_as_sentence_transformers_reads_them(tiny_reranker_path, tmp_path):
    folder = tmp_path / "tanh"
    shutil.copytree(tiny_reranker_path, folder)
    config = json.loads((folder / "config.json").read_text())
    config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.activation.Tanh"}
    (folder / "config.json").write_text(json.dumps(config))
    exported_checkpoint(folder, SCORES)
    for settings in ({}, {"max_seq_length": 100}):
        torch_free = OnnxTextScorer(folder, on_onnx(folder, **settings), "rerank")
        reference = TextScorer(folder, on_onnx(folder, **settings), "rerank")
        assert torch_free.info == reference.info and torch_free.info.activation == "tanh"


def test_what_it_does_not_run_goes_to_the_torch_backed_class(tiny_reranker_path, tiny_classifier_path, tmp_path):
    with pytest.raises(ModelLoadError, match="a reranker needs one"):
        OnnxTextScorer(tiny_classifier_path, on_onnx(tiny_classifier_path), "rerank")
    folder = tmp_path / "two-modules"
    shutil.copytree(tiny_reranker_path, folder)
    transformer = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.Transformer"}
    (folder / "modules.json").write_text(json.dumps([transformer, {**transformer, "path": "1_Dense", "idx": 1}]))
    with pytest.raises(TorchNeeded, match="not one Transformer"):
        OnnxTextScorer(folder, on_onnx(folder), "rerank")
    assert load_torch_free(folder, on_onnx(folder), "rerank") is None


def colbert_rows(folder: Path, texts: tuple[str, ...], is_query: bool) -> list[TokenizedText]:
    ids, expansions = TextTokenizer(folder, ModelConfig(model_id=str(folder)), "colbert").encode_roles(
        list(texts), is_query
    )
    return [TokenizedText(model="m", input_ids=row, is_query=is_query, expansion=n) for row, n in zip(ids, expansions)]


def test_colbert_vectors_equal_the_torch_backed_class(colbert_path, colbert_reference):
    exported_checkpoint(colbert_path, "feature-extraction")
    cfg = on_onnx(colbert_path)
    torch_free, reference = OnnxColbertEncoder(colbert_path, cfg), ColbertEncoder(colbert_path, cfg)
    assert torch_free.info == reference.info
    mixed = colbert_rows(colbert_path, QUERIES, True) + colbert_rows(colbert_path, DOCUMENTS, False)
    got, expected = torch_free.forward(mixed), reference.forward(mixed)
    assert [len(vectors) for vectors in got] == [len(vectors) for vectors in expected]
    for mine, theirs, pylate in zip(got, expected, [*colbert_reference.queries, *colbert_reference.documents]):
        assert_same_vectors(mine, theirs, min_cosine=MIN_COSINE)
        assert_same_vectors(mine, pylate, min_cosine=0.9999)  # PyLate's own, as tests/unit/models/test_hybrid_models


def test_load_model_serves_each_kind_torch_free_on_onnx(colbert_path, tiny_reranker_path, tiny_classifier_path):
    for folder, torch_free in (
        (colbert_path, OnnxColbertEncoder),
        (tiny_reranker_path, OnnxTextScorer),
        (tiny_classifier_path, OnnxTextScorer),
    ):
        assert isinstance(load_model(folder, on_onnx(folder)), torch_free), folder
