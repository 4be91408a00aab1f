"""Checkpoints kept in BentoML's model store, so a Bento carries its weights and starts with no network.

`embento models import` copies a checkpoint (a folder, a packaged model or a Hub download) into the store.
The configuration names it as `model_id: bentoml://<name>[:<version>]`. Services declare the store models
they load as `BentoModel`s, so `bentoml build` pins their exact versions in `bento.yaml`, and `bentoml
export`, `containerize` and `push` carry the files. A Bento being served uses the versions it pinned, even
when a newer one has been imported since.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import bentoml
from bentoml._internal.context import server_context

from config.errors import ConfigError, ModelLoadError
from config.served import served_bento, store_tags
from config.settings import (
    BENTO_CONFIG_ENV,
    CONFIG_FILE_NAME,
    ENV_PREFIX,
    ModelConfig,
    carried_text,
    get_config,
    load_config,
)
from models.kinds import detect_kind
from models.resolve import resolve_model

logger = logging.getLogger(__name__)
T = TypeVar("T", bound=type)
IGNORED_FILES = shutil.ignore_patterns(".git", ".cache", ".gitattributes")


def store_name(source: str) -> str:
    """A valid store name from a Hub id or folder: its last part, lower case (`BAAI/bge-small-en-v1.5`
    → `bge-small-en-v1.5`)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", Path(source.rstrip("/")).name.lower()).strip("-._")
    if not name:
        raise ConfigError(f"cannot derive a store name from '{source}'; pass --name")
    return name


def kind_label(folder: Path) -> str:
    """The detected kind, for information; "undetected" where detection cannot tell it: such a checkpoint is
    still imported, to be served with `kind:` set."""
    try:
        return detect_kind(folder)
    except ConfigError:
        return "undetected"


def import_checkpoint(source: str, name: str | None = None, revision: str | None = None) -> bentoml.Model:
    """Copy a checkpoint into the model store; its metadata records where it came from and what it is."""
    folder = resolve_model(source, revision)
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"'{source}' ({folder}) holds no config.json; it is not a transformers checkpoint")
    labels = {"kind": kind_label(folder), "source": "embento"}
    metadata = {"model_id": source, "revision": revision or ""}
    with bentoml.models.create(name or store_name(source), labels=labels, metadata=metadata) as model:
        shutil.copytree(folder, model.path, dirs_exist_ok=True, ignore=IGNORED_FILES)
        readable_by_all(Path(model.path))
    return model


def readable_by_all(folder: Path) -> None:
    """The copy keeps the source's modes: save_pretrained leaves model.safetensors 0600, a temporary folder is
    0700. An image carries the store's files owned by its own user, and the uid of an OpenShift pod reads them
    through their "other" bits."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(path.stat().st_mode | (0o755 if path.is_dir() else 0o444))


def bento_config_env() -> dict[str, str]:
    """The gateway's `envs` entry that carries the configuration into a Bento, however it is built (`embento
    build` or a plain `bentoml build` under EMBENTO_CONFIG): BentoML records it in `bento.yaml`, where
    `load_config` reads it back wherever the Bento is served. Served from a Bento, the entry it was built with.
    Stage `runtime`: it stays out of the image's Dockerfile, which has the Bento's `bento.yaml` anyway."""
    recorded = next((env for env in served_bento().get("envs") or [] if env.get("name") == BENTO_CONFIG_ENV), None)
    value = recorded["value"] if recorded else carried_text(get_config())
    return {"name": BENTO_CONFIG_ENV, "value": value, "stage": "runtime"}


def check_served_bento(needed: set[str]) -> None:
    """A Bento serves the configuration it carries: the one in force at build time, recorded in its
    `bento.yaml` (`bento_config_env`).

    It holds the services that configuration needed, so one that needs more (say, a reranker added through
    EMBENTO_CONFIG) cannot be served from it. A Bento built before the configuration was recorded there, whose
    `embento.yaml` is not the configuration it was built with (a plain `bentoml build` under EMBENTO_CONFIG), is
    refused rather than serving other models silently. EMBENTO_* variables set where it runs are overrides,
    and logged as such."""
    bento = served_bento()
    if not bento:
        return
    labeled = (bento.get("labels") or {}).get("models")
    built_for = labeled.split(",") if labeled is not None else None
    carried = [m.served_model_name for m in load_config({}, cwd=Path.cwd()).models]
    if built_for is not None and built_for != carried:
        raise ConfigError(
            f"this Bento ({bento.get('version')}) was built for the models {built_for}, but the "
            f"{CONFIG_FILE_NAME} it carries serves {carried}: it was built under a configuration it does not "
            "hold. Rebuild it with `embento build`, which writes the configuration in force into the Bento"
        )
    built = {s["name"] for s in bento.get("services") or []}
    if built and not needed <= built:
        raise ConfigError(
            f"this Bento ({bento.get('version')}) was built with the services {sorted(built)}, but the "
            f"configuration needs {sorted(needed - built)} too: rebuild it with that configuration in embento.yaml"
        )
    overrides = sorted(name for name in os.environ if name.startswith(ENV_PREFIX) and name != BENTO_CONFIG_ENV)
    if overrides and server_context.worker_index is None:  # once, in `bentoml serve`'s own process
        logger.warning(
            "%s override the configuration this Bento (%s) was built with", ", ".join(overrides), bento.get("version")
        )


def pin_store_models(configs: Iterable[ModelConfig]) -> Callable[[T], T]:
    """Class decorator for a service: declare the store models it loads, so a Bento build pins them."""
    tags = [store_tags()[c.served_model_name] for c in configs if c.served_model_name in store_tags()]

    def declare(cls: T) -> T:
        for index, tag in enumerate(tags):
            setattr(cls, f"store_model_{index}", bentoml.models.BentoModel(tag))
        return cls

    return declare
