"""The models added at run time (`POST /admin/models`), kept across restarts of the server:
`<cache_dir>/run-time-models.json`.

The file is the added models' entries, each as `models:` in embento.yaml takes it (the fields the admin sent), in
the order they were added: `{"format": 1, "models": [{"served_model_name": "m", "model_id": "...", ...}]}`.
It is written whole by the gateway worker that answers an add or a removal (a temporary file, then an atomic
replace: a reader never sees half of it) and read once at the server's start, when every added model is wanted
loaded again. A file that cannot be read, is not that shape, holds an entry the configuration's rules refuse, or
names a model or alias the configuration names too, stops the start with a ConfigError naming the file and the
entry: it is never silently dropped or rewritten.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from config.errors import ConfigError
from config.settings import EmbentoConfig, ModelConfig

KEPT_FILE = "run-time-models.json"
FORMAT = 1


def kept_path(config: EmbentoConfig) -> Path:
    """Where this configuration keeps its added models."""
    return Path(config.cache_dir).expanduser() / KEPT_FILE


def read_kept(path: Path, config: EmbentoConfig) -> list[ModelConfig]:
    """The added models kept at `path` (none when there is no file); ConfigError when it cannot be trusted, or when
    `config` names one of them (the configuration has changed since: an operator decides which stays)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"{path}: the models added at run time cannot be read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: the models added at run time are not valid JSON ({exc}); {_remedy(path)}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("models"), list):
        raise ConfigError(
            f'{path}: not a file of models added at run time ({{"format": {FORMAT}, "models": [...]}}); {_remedy(path)}'
        )
    kept = [_entry(path, index, entry) for index, entry in enumerate(data["models"])]
    names = [m.served_model_name for m in config.models] + [alias for m in config.models for alias in m.aliases]
    for index, model in enumerate(kept):
        if clashing := sorted({model.served_model_name, *model.aliases} & set(names)):
            raise ConfigError(
                f"{path}: models[{index}] names {clashing}, which the configuration names too; {_remedy(path)}"
            )
        names += [model.served_model_name, *model.aliases]
    return kept


def _entry(path: Path, index: int, entry: object) -> ModelConfig:
    try:
        return ModelConfig.model_validate(entry)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "the entry"
        raise ConfigError(f"{path}: models[{index}].{field}: {first['msg']}; {_remedy(path)}") from None


def write_kept(path: Path, models: Sequence[ModelConfig]) -> None:
    """The added models, written whole: a temporary file beside it, then an atomic replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [
        model.model_dump(mode="json", exclude_unset=True) | {"served_model_name": model.served_model_name}
        for model in models
    ]
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"format": FORMAT, "models": entries}, indent=1) + "\n")
    temporary.replace(path)


def _remedy(path: Path) -> str:
    return f"fix it, or remove it to start without the models added at run time ({path.name})"
