"""Choosing the model for a request, as plain Python."""

from __future__ import annotations

import pytest

from config import errors
from gateway.routing import check_modalities, choose_model
from models.base import ModelInfo


def _info(name: str, kind: str, modalities: list[str]) -> ModelInfo:
    return ModelInfo(
        served_model_name=name,
        model_id=name,
        kind=kind,
        modalities=modalities,
        backend="torch",
        dimension=8,
        max_input_tokens=16,
        normalized=True,
        device="cpu",
        dtype="float32",
    )


INFOS = {
    "clip": _info("clip", "clip", ["text", "image"]),
    "minilm": _info("minilm", "embed", ["text"]),
    "reranker": _info("reranker", "rerank", ["text"]),
    "clap": _info("clap", "clap", ["text", "audio"]),
}


def test_without_a_name_the_first_capable_model_answers_and_dedicated_models_come_first():
    assert choose_model(INFOS, None, "embed").served_model_name == "clip"  # configuration order
    assert choose_model(INFOS, None, "rerank").served_model_name == "reranker"  # before CLIP's image rerank
    with pytest.raises(errors.InvalidRequest, match="no served model can classify"):
        choose_model(INFOS, None, "classify")


def test_unknown_and_incapable_models():
    with pytest.raises(errors.UnknownModel, match="served models"):
        choose_model(INFOS, "nope", "embed")
    with pytest.raises(errors.InvalidRequest, match=r"cannot rerank; models that can: \['reranker', 'clip'\]"):
        choose_model(INFOS, "minilm", "rerank")


def test_modalities_name_the_models_that_take_them():
    check_modalities(INFOS, INFOS["clip"], {"text", "image"})
    with pytest.raises(errors.InvalidRequest, match=r"not \['audio'\]; models that do: \['clap'\]"):
        check_modalities(INFOS, INFOS["clip"], {"audio"})
