"""The kind registry (`models/kinds.py`): its kinds as the configuration knows them, what follows from a kind
(output shapes, routes), and the facts decided once per model (its kind's class, its scorer variant) and
recorded in its `ModelInfo`. Elsewhere: each kind's model service and API exist (tests/unit/runners), each
family's checkpoint is detected as its kind (tests/unit/models/test_scoring.py, test_families.py, test_media.py,
test_hybrid_models.py), a backend a kind does not run on is refused (test_backends.py)."""

from __future__ import annotations

import json
from typing import get_args

from config.model_settings import ModelConfig, ModelKind
from models.base import ModelInfo
from models.inference.auto_backend import load_model
from models.kinds import KIND_SPECS, Kind, model_scorer, spec


def info(kind: Kind) -> ModelInfo:
    return ModelInfo(
        served_model_name="m",
        model_id="m",
        kind=kind,
        modalities=list(spec(kind).modalities),
        backend="torch",
        dimension=4,
        max_input_tokens=8,
        normalized=True,
        device="cpu",
        dtype="float32",
    )


def test_every_kind_has_one_spec_and_the_configuration_knows_them_all():
    assert set(KIND_SPECS) == set(get_args(Kind))
    assert get_args(ModelKind) == ("auto", *get_args(Kind))  # config/ sits under models/: its own copy


def test_output_shapes_read_from_the_spec():
    shapes = {kind: (info(kind).sparse, info(kind).multi_vector) for kind in KIND_SPECS}
    assert {kind for kind, (sparse, _) in shapes.items() if sparse} == {"sparse"}
    assert {kind for kind, (_, multi) in shapes.items() if multi} == {"colpali", "colbert"}
    assert "multi_vector" not in info("colpali").to_dict()  # derived, so never sent between processes


def test_the_ready_banner_has_routes_for_every_capability():
    from commands.serve import CAPABILITY_ROUTES

    assert set(CAPABILITY_ROUTES) == {c for kind_spec in KIND_SPECS.values() for c in kind_spec.capabilities}


def test_the_scorer_variant_is_read_from_the_files_where_the_kind_allows_it(tmp_path, tiny_reranker_path):
    causal = tmp_path / "causal"
    causal.mkdir()
    (causal / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    assert model_scorer(tiny_reranker_path, "rerank") == "cross-encoder"
    assert model_scorer(causal, "rerank") == "causal-lm"  # a configured `kind: rerank` over a bare causal LM
    assert model_scorer(causal, "classify") == "cross-encoder"  # a classifier needs its head, causal or not
    assert model_scorer(causal, "embed") is None and model_scorer(tiny_reranker_path, "clip") is None


def test_models_record_their_scorer(tiny_reranker_path, qwen3_reranker_path, plain_qwen3_reranker_path):
    for path, scorer in (
        (tiny_reranker_path, "cross-encoder"),
        (qwen3_reranker_path, "causal-lm"),
        (plain_qwen3_reranker_path, "causal-lm"),
    ):
        model = load_model(path, ModelConfig(model_id=str(path), device="cpu"))
        assert (model.info.kind, model.info.scorer) == ("rerank", scorer), path


def test_each_kind_loads_in_its_own_class(tiny_bert_path, tiny_classifier_path):
    """On torch, each kind's `loader`. (Under `backend: auto` a text embedder whose export an earlier test left
    loads in its `torch_free_loader` instead: tests/unit/models/inference/test_onnx_encoder.py.)"""
    from models.inference.sparse_encoder import SparseTextEncoder
    from models.inference.text_encoder import TextEncoder
    from models.inference.text_scorer import TextScorer

    for path, kind, model_class, scorer in (
        (tiny_bert_path, "embed", TextEncoder, None),
        (tiny_bert_path, "sparse", SparseTextEncoder, None),
        (tiny_classifier_path, "classify", TextScorer, "cross-encoder"),
    ):
        model = load_model(path, ModelConfig(model_id=str(path), kind=kind, device="cpu", backend="torch"))
        assert isinstance(model, model_class) and (model.info.kind, model.info.scorer) == (kind, scorer)
