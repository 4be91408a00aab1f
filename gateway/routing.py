"""Which served model answers a request: by name, by capability, by the modalities it takes."""

from __future__ import annotations

from collections.abc import Mapping

from config import errors
from models.base import Modality, ModelInfo


def choose_model(infos: Mapping[str, ModelInfo], requested: str | None, capability: str | None) -> ModelInfo:
    """The named model, or without a name the first (in configuration order) that can do `capability`,
    preferring models for which it is the main capability (a reranker over CLIP's image rerank). A capability
    of None takes any model."""
    capable = [name for name, info in infos.items() if capability is None or capability in info.capabilities]
    capable.sort(key=lambda name: infos[name].capabilities[0] != capability)
    if requested is None:
        if not capable:
            raise errors.InvalidRequest(f"no served model can {capability}", param="model")
        requested = capable[0]
    if requested not in infos:
        raise errors.UnknownModel(
            f"model '{requested}' is not served here; served models: {list(infos)}", param="model"
        )
    if requested not in capable:
        raise errors.InvalidRequest(
            f"model '{requested}' cannot {capability}; models that can: {capable or 'none'}", param="model"
        )
    return infos[requested]


def check_modalities(infos: Mapping[str, ModelInfo], info: ModelInfo, modalities: set[Modality]) -> None:
    missing = sorted(modalities - set(info.modalities))
    if missing:
        able = [name for name, other in infos.items() if set(missing) <= set(other.modalities)]
        raise errors.InvalidRequest(
            f"model '{info.served_model_name}' takes {info.modalities}, not {missing}; models that do: "
            f"{able or 'none'}",
            param="model",
        )
