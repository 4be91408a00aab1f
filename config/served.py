"""The configuration as served: each store model's `model_id` replaced by its folder in BentoML's model
store, at the version the Bento being served pinned (bento/packaging/store.py imports checkpoints and pins them)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import bentoml

from config.errors import ConfigError, ModelLoadError
from config.model_settings import STORE_PREFIX, store_tag
from config.settings import EmbentoConfig, bento_info, get_config


@cache
def served_bento() -> dict:
    """The `bento.yaml` of the Bento being served; {} when serving from source."""
    return bento_info(Path.cwd())


def _bento_pins() -> dict[str, str]:
    """Model name → exact tag, as pinned by the Bento being served."""
    services = served_bento().get("services") or []
    return {str(m["tag"]).split(":")[0]: str(m["tag"]) for s in services for m in s.get("models") or []}


def stored_model(tag: str) -> bentoml.Model:
    """The store entry for `name[:version]`; no version (or `latest`) means the Bento's pin, else the newest."""
    name, _, version = tag.partition(":")
    if version in ("", "latest"):
        tag = _bento_pins().get(name, f"{name}:latest")
    try:
        return bentoml.models.get(tag)
    except bentoml.exceptions.NotFound:
        raise ModelLoadError(
            f"model '{STORE_PREFIX}{tag}' is not in the BentoML model store; add it with "
            f"`embento models import <hub id or folder> --name {name}` (BENTOML_HOME sets the store's place)"
        ) from None
    except (ValueError, bentoml.exceptions.BentoMLException) as exc:
        raise ConfigError(f"'{STORE_PREFIX}{tag}' does not name a store model: {exc}") from None


@cache
def store_tags() -> dict[str, str]:
    """Served model name → exact store tag, for every configured `bentoml://` model."""
    return {
        m.served_model_name: str(stored_model(tag).tag) for m in get_config().models if (tag := store_tag(m.model_id))
    }


@cache
def served_config() -> EmbentoConfig:
    """The configuration with each store model's `model_id` replaced by its folder in the store."""
    tags = store_tags()
    models = [
        m.model_copy(update={"model_id": bentoml.models.get(tags[m.served_model_name]).path})
        if m.served_model_name in tags
        else m
        for m in get_config().models
    ]
    return get_config().model_copy(update={"models": models})
