"""Checks of the model a request names, or of the one chosen for it (`gateway/routing.py` chooses, these refuse):
served here, able to do what is asked, taking the inputs' modalities, and for text-only operations a text model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from config import errors
from models.base import Modality, ModelInfo
from models.preprocessing.text_tokenizer import TextTokenizer


def check_capable(capable: Sequence[str], message: str) -> None:
    """Some model here can do what a request that names none asks; `message` says what none can."""
    if not capable:
        raise errors.InvalidRequest(message, param="model")


def check_named(infos: Mapping[str, ModelInfo], requested: str, capability: str | None, capable: Sequence[str]) -> None:
    """The model a request names is served here, and is one of those that can do `capability`."""
    if requested not in infos:
        raise errors.UnknownModel(
            f"model '{requested}' is not served here; served models: {list(infos)}", param="model"
        )
    if requested not in capable:
        raise errors.InvalidRequest(
            f"model '{requested}' cannot {capability}; models that can: {capable or 'none'}", param="model"
        )


def check_modalities(infos: Mapping[str, ModelInfo], info: ModelInfo, modalities: set[Modality]) -> None:
    missing = sorted(modalities - set(info.modalities))
    if missing:
        able = [name for name, other in infos.items() if set(missing) <= set(other.modalities)]
        raise errors.InvalidRequest(
            f"model '{info.served_model_name}' takes {info.modalities}, not {missing}; models that do: "
            f"{able or 'none'}",
            param="model",
        )


def text_model(info: ModelInfo, preparation: object) -> TextTokenizer:
    """The model's tokenizer, for what takes text only (tokenize, decode, token ids, pairs); a model whose
    preparation (`gateway.inputs.preprocessors`) is not one is refused."""
    if not isinstance(preparation, TextTokenizer):
        raise errors.InvalidRequest(f"model '{info.served_model_name}' is not a text model", param="model")
    return preparation
