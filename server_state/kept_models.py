"""The server's wanted set (server_state/model_set.py), kept across restarts: `<cache_dir>/run-time-models.json`.

The file is the whole set as the last change left it: every model's wanted state (`Wanted`: held or not, loadable by
requests, its `keep_alive`, and who asked for each), the aliases, and the entries of the models added at run time
(`POST /admin/models`, each as `models:` in embento.yaml takes it, in the order they were added):
`{"format": 2, "models": {"m": {"loaded": true, ...}}, "aliases": {"prod": "m"}, "added": [{"model_id": ...}]}`.
It is written whole by whichever process changes the set, under the set's lock (a temporary file, then an atomic
replace: a reader never sees half of it), and read at the server's start, reconciled with the configuration:
- a model's wanted state is the file's where someone asked for it (`asked_by`, `keep_alive_by` set), else the
  configuration's: an admin unload lasts, and a change of `load` or `keep_alive` in embento.yaml applies to the
  models nobody changed;
- a configured model the configuration no longer has is dropped (an INFO line); one newly configured starts as
  configured, with its configured aliases where their names are free;
- an alias whose model no longer exists, or whose name is now a model's own, is dropped (an INFO line).
A file that cannot be read, is not that shape, holds an entry the configuration's rules refuse, or adds a model or
alias the configuration names too, stops the start with a ConfigError naming the file: never silently dropped or
rewritten. A format-1 file (the added entries alone, as `models`) is read as one with nothing else changed.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from config.errors import ConfigError
from config.settings import EmbentoConfig, ModelConfig
from server_state.model_set import ModelSet, SharedModelSet, Wanted
from server_state.server_files import server_file

logger = logging.getLogger(__name__)

KEPT_FILE = "run-time-models.json"
FORMAT = 2


class _Kept(BaseModel):
    """The file's shape; the added entries are validated one by one, as `models:` entries (`_entry`)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal[2]
    models: dict[str, Wanted] = {}
    aliases: dict[str, str] | None = None  # None: a format-1 file, which kept no aliases of its own
    added: list[Any] = []


def kept_path(config: EmbentoConfig) -> Path:
    """Where this configuration keeps its wanted set."""
    return Path(config.cache_dir).expanduser() / KEPT_FILE


def write_kept(path: Path, models: ModelSet) -> None:
    """The wanted set, written whole: a temporary file beside it, then an atomic replace. Its `version` is not kept:
    it counts the changes of one server's run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "format": FORMAT,
        "models": {name: asdict(wanted) for name, wanted in models.models.items()},
        "aliases": models.aliases,
        "added": [added.settings for added in models.added.values()],
    }
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # one per process: writers never share one
    temporary.write_text(json.dumps(data, indent=1) + "\n")
    temporary.replace(path)


def read_kept(path: Path, config: EmbentoConfig, logs: bool = True) -> ModelSet:
    """The wanted set kept at `path`, reconciled with `config` (the configured set when there is no file);
    ConfigError when it cannot be trusted. `logs`: whether to log what is dropped (every process reads the file at
    its start; one of them says so)."""
    kept = _parse(path)
    models = ModelSet.configured(config)
    names = set(models.models) | set(models.aliases)
    for index, entry in enumerate(kept.added):
        model = _entry(path, index, entry)
        if clashing := sorted({model.served_model_name, *model.aliases} & names):
            raise ConfigError(
                f"{path}: added[{index}] names {clashing}, which the configuration names too; {_remedy(path)}"
            )
        names |= {model.served_model_name, *model.aliases}
        models.add(model, "admin")
    _restore_wanted(models, kept.models, path if logs else None)
    if kept.aliases is not None:
        _restore_aliases(models, kept, config, path if logs else None)
    return models


def _parse(path: Path) -> _Kept:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return _Kept(format=2, aliases=None)
    except OSError as exc:
        raise ConfigError(f"{path}: the kept models cannot be read: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: the kept models are not valid JSON ({exc}); {_remedy(path)}") from None
    if isinstance(data, dict) and data.get("format") == 1 and isinstance(data.get("models"), list):
        data = {"format": 2, "added": data["models"]}  # the first format: the added entries alone
    try:
        return _Kept.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "the file"
        shape = f'{{"format": {FORMAT}, "models": {{...}}, "aliases": {{...}}, "added": [...]}}'
        raise ConfigError(f"{path}: {field}: {first['msg']} (the shape: {shape}); {_remedy(path)}") from None


def _entry(path: Path, index: int, entry: object) -> ModelConfig:
    try:
        return ModelConfig.model_validate(entry)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "the entry"
        raise ConfigError(f"{path}: added[{index}].{field}: {first['msg']}; {_remedy(path)}") from None


def _restore_wanted(models: ModelSet, kept: dict[str, Wanted], says: Path | None) -> None:
    """Each model's kept state where someone asked for it; the configuration's where nobody did (None: as started),
    so that an edit of embento.yaml applies to what nobody changed."""
    for name, wanted in kept.items():
        entry = models.models.get(name)
        if entry is None:
            if says is not None:
                logger.info("%s: model '%s' is no longer configured: dropped from the kept models", says, name)
            continue
        if wanted.asked_by is not None:
            entry.loaded, entry.on_request, entry.asked_by = wanted.loaded, wanted.on_request, wanted.asked_by
        if wanted.keep_alive_by is not None:
            entry.keep_alive_s, entry.keep_alive_by = wanted.keep_alive_s, wanted.keep_alive_by


def _restore_aliases(models: ModelSet, kept: _Kept, config: EmbentoConfig, says: Path | None) -> None:
    """The kept aliases (the admin may have made, moved or removed any), less those whose model is gone or whose
    name is now a model's; then a newly configured model's configured aliases, where their names are free."""
    aliases: dict[str, str] = {}
    for alias, target in (kept.aliases or {}).items():
        if target in models.models and alias not in models.models:
            aliases[alias] = target
        elif says is not None:
            gone = f"model '{target}' no longer exists" if target not in models.models else "it names a model now"
            logger.info("%s: alias '%s' dropped from the kept models: %s", says, alias, gone)
    for model in config.models:
        if model.served_model_name not in kept.models:  # newly configured: as configured
            aliases |= {alias: model.served_model_name for alias in model.aliases if alias not in aliases}
    models.aliases = aliases


def server_model_set(config: EmbentoConfig) -> SharedModelSet | None:
    """This server's shared set (None outside a BentoML server, where there is nothing to share with): started
    from the kept file, and kept in it at each change."""
    marker = server_file("")
    if marker is None:
        return None
    path = kept_path(config)
    started = read_kept(path, config, logs=False)
    return SharedModelSet(marker.parent, marker.name, config, started, lambda models: write_kept(path, models))


def _remedy(path: Path) -> str:
    return f"fix it, or remove it to start with the configured models alone ({path.name})"
