"""Which served model answers a request: by name, else by capability. What refuses a request's model (not served,
not able to, not taking its modalities) is `gateway.validation.models`."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from config import errors
from gateway.validation.models import check_capable, check_named
from models.base import Kind, ModelInfo
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
    check_capable(capable, f"no model served here {doing}")
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
        check_capable(capable, f"no served model can {capability}")
        requested = capable[0]
    check_named(infos, requested, capability, capable)
    return infos[requested]
