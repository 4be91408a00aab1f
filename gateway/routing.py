"""Which served model answers a request: by name, by capability, by the modalities it takes."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from config import errors
from models.base import Kind, Modality, ModelInfo
from models.kinds import spec


def default_model(
    kinds: Mapping[str, Kind], servable: Callable[[str], bool], capability: str | None, doing: str = ""
) -> str:
    """The model for a request that names none: the first configured (of `kinds`) that can do `capability`,
    preferring models for which it is the main capability, among those `servable` now, loaded or loadable on
    demand: a lazy or evicted model is the default as a loaded one is, so an eviction never moves these requests
    onto another model's vectors. No configured model able to is the client's to know (400); none servable now,
    though one is configured (unloaded by the admin API, or failed to load), is the server's state (503).
    `doing`: what the messages call the task (default: `can <capability>`)."""
    doing = doing or f"can {capability}"
    capable = [name for name, kind in kinds.items() if capability is None or capability in spec(kind).capabilities]
    capable.sort(key=lambda name: spec(kinds[name]).capabilities[0] != capability)
    if not capable:
        raise errors.InvalidRequest(f"no model served here {doing}", param="model")
    for name in capable:
        if servable(name):
            return name
    raise errors.ModelUnavailable(
        f"no model that {doing} is loaded or loadable now: {capable} were unloaded (the admin API) or failed to "
        "load; GET /v1/models says which",
        param="model",
    )


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
