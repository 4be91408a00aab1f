"""Choosing the model for a request, as plain Python."""

from __future__ import annotations

import pytest

from config import errors
from gateway.routing import choose_model, default_model
from gateway.validation.models import check_modalities
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


KINDS = {name: info.kind for name, info in INFOS.items()}


def test_a_request_naming_no_model_gets_the_first_configured_that_may_serve_it_loaded_or_not():
    """A model a request may load (lazy, or evicted) is the default as if it were loaded: an eviction never moves
    the requests that name no model onto another model's vectors."""
    assert default_model(KINDS, lambda name: True, "embed") == "clip"
    assert default_model(KINDS, lambda name: name != "clip", "embed") == "minilm"  # unloaded by the admin API
    assert default_model(KINDS, lambda name: True, "rerank") == "reranker"


def test_no_model_that_may_serve_it_is_the_servers_state_a_503_and_none_configured_is_a_400():
    with pytest.raises(errors.ModelUnavailable, match=r"no model that can embed is loaded or loadable now"):
        default_model(KINDS, lambda name: False, "embed")
    with pytest.raises(errors.InvalidRequest, match="no model served here can classify"):
        default_model(KINDS, lambda name: True, "classify")


def test_unknown_and_incapable_models():
    with pytest.raises(errors.UnknownModel, match="served models"):
        choose_model(INFOS, "nope", "embed")
    with pytest.raises(errors.InvalidRequest, match=r"cannot rerank; models that can: \['reranker', 'clip'\]"):
        choose_model(INFOS, "minilm", "rerank")


def test_modalities_name_the_models_that_take_them():
    check_modalities(INFOS, INFOS["clip"], {"text", "image"})
    with pytest.raises(errors.InvalidRequest, match=r"not \['audio'\]; models that do: \['clap'\]"):
        check_modalities(INFOS, INFOS["clip"], {"audio"})
