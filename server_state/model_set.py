"""Which models one server should hold, and what each model-service worker holds: the files its processes share.

The gateway workers (the admin API, a lazy model's first request, a request's `keep_alive`) write the wanted set;
every model-service worker reads it and loads, unloads or evicts to match (runners/residency.py), then writes what
it holds to its own status file, which every gateway worker reads (gateway/served/). A file rather than a call:
a call reaches one worker of a service, and a server may run several of each.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from config.settings import EmbentoConfig, ModelConfig
from server_state.shared_table import SLOTS, SharedTable

State = Literal["loaded", "loading", "unloaded", "failed"]
SET_FILE = "model-set.json"
STATUS_PREFIX = "model-status-"


@dataclass
class Wanted:
    """What the server should do with one model: hold it (`loaded`); whether a request may load it (False after an
    admin unload, so that it answers 404 until loaded again); how long it stays idle (None: forever). And who asked,
    for the log lines of the model services that act on it: who last wanted it loaded or unloaded, and who set its
    `keep_alive` (None: the configuration)."""

    loaded: bool
    on_request: bool = True
    keep_alive_s: float | None = None
    asked_by: str | None = None
    keep_alive_by: str | None = None


@dataclass
class Added:
    """A model added at run time: its entry (as `models:` in embento.yaml takes it) and its column in the tables the
    processes share (pins, warm flags), one of `ADDED_SLOTS` kept after the configured models'."""

    settings: dict[str, Any]
    slot: int

    def config(self) -> ModelConfig:
        return ModelConfig.model_validate(self.settings)


ADDED_SLOTS = 32  # models that may be added at run time at once: the shared tables' columns are fixed at start


@dataclass
class ModelSet:
    """The wanted state of every model the server may serve, the models added at run time, and the aliases;
    `version` grows with each change."""

    version: int = 0
    models: dict[str, Wanted] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    added: dict[str, Added] = field(default_factory=dict)

    @classmethod
    def configured(cls, config: EmbentoConfig) -> ModelSet:
        """As the configuration starts it: eager models held, lazy ones not, the configured aliases."""
        return cls(
            models={m.served_model_name: Wanted(m.load == "eager", True, m.keep_alive) for m in config.models},
            aliases={alias: m.served_model_name for m in config.models for alias in m.aliases},
        )

    def add(self, model: ModelConfig, by: str) -> None:
        """A model added at run time, wanted loaded, with its aliases (its name and aliases checked free)."""
        name = model.served_model_name
        used = {added.slot for added in self.added.values()}
        slot = next(slot for slot in range(ADDED_SLOTS) if slot not in used)
        settings = model.model_dump(mode="json", exclude_unset=True) | {"served_model_name": name}
        self.added[name] = Added(settings, slot)
        self.models[name] = Wanted(True, True, model.keep_alive, asked_by=by)
        self.aliases.update({alias: name for alias in model.aliases})

    def remove(self, name: str) -> None:
        """A model added at run time, gone with its aliases."""
        del self.added[name]
        self.models.pop(name, None)
        self.aliases = {alias: target for alias, target in self.aliases.items() if target != name}

    def column(self, name: str) -> str:
        """A model's column in the tables the processes share: its own name, or an added model's slot."""
        return added_column(self.added[name].slot) if name in self.added else name

    def resolve(self, name: str) -> str:
        """The model a name (an alias or a model's own) stands for."""
        return self.aliases.get(name, name)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ModelSet:
        data = json.loads(text)
        models = {name: Wanted(**wanted) for name, wanted in data["models"].items()}
        added = {name: Added(**entry) for name, entry in data.get("added", {}).items()}
        return cls(data["version"], models, data["aliases"], added)


@dataclass
class ModelStatus:
    """One model as one model-service worker holds it: its state, why it failed, the seconds its last load took, and
    once loaded its facts (`ModelInfo` as a dict) and the bytes of its weights."""

    state: State
    reason: str | None = None
    load_s: float | None = None
    info: dict[str, Any] | None = None
    weight_bytes: int = 0
    refused: bool = False  # failed because the budget had no room: worth another try later


class SharedModelSet:
    """The wanted set and the workers' status files in `folder`: read by anyone, changed under a lock."""

    def __init__(
        self,
        folder: Path,
        prefix: str,
        config: EmbentoConfig,
        started: ModelSet | None = None,
        keep: Callable[[ModelSet], None] | None = None,
    ) -> None:
        """`started`: the set until the first change (by default the configured one; in a server, the one kept
        across restarts); `keep`: called with each changed set under the lock, to keep it across restarts
        (server_state/kept_models.py)."""
        self._path = folder / f"{prefix}{SET_FILE}"
        self._lock = folder / f"{prefix}{SET_FILE}.lock"
        self._status_prefix = f"{prefix}{STATUS_PREFIX}"
        self._folder = folder
        self._started = self._read = started if started is not None else ModelSet.configured(config)
        self._keep = keep
        self._read_key: tuple[int, int, int] | None = None

    def read(self) -> ModelSet:
        """The wanted set (the configured one until someone changes it), not to be changed in place. Parsed again
        only when the file was replaced: a gateway reads it for every request naming a model (a stat, ~5 µs,
        where a parse of 17 models' set took ~30)."""
        try:
            found = self._path.stat()
        except FileNotFoundError:
            return self._started
        key = (found.st_ino, found.st_mtime_ns, found.st_size)  # each change is a new file
        if key != self._read_key:
            self._read, self._read_key = self._parse(), key
        return self._read

    def _parse(self) -> ModelSet:
        try:
            return ModelSet.from_json(self._path.read_text())
        except FileNotFoundError:
            return ModelSet.from_json(self._started.to_json())  # a copy: `change` edits it

    def change(self, edit: Callable[[ModelSet], None]) -> ModelSet:
        """`edit` applied to the current set under the lock, then written whole (a reader never sees half)."""
        with self._locked():
            models = self._parse()
            edit(models)
            models.version += 1
            temporary = self._path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(models.to_json())
            temporary.replace(self._path)
            if self._keep is not None:  # under the lock: the kept file follows the changes in their order
                self._keep(models)
            return models

    def write_status(self, worker: str, statuses: dict[str, ModelStatus]) -> None:
        """What one model-service worker (`service-index`) holds now."""
        path = self._folder / f"{self._status_prefix}{worker}.json"
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({name: asdict(status) for name, status in statuses.items()}))
        temporary.replace(path)

    def statuses(self) -> dict[str, dict[str, ModelStatus]]:
        """Every model-service worker's statuses, by worker."""
        found: dict[str, dict[str, ModelStatus]] = {}
        for path in self._folder.glob(f"{self._status_prefix}*.json"):
            worker = path.name[len(self._status_prefix) : -len(".json")]
            try:
                found[worker] = {name: ModelStatus(**s) for name, s in json.loads(path.read_text()).items()}
            except (FileNotFoundError, json.JSONDecodeError):  # replaced as it was read: the next read has it
                continue
        return found

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


PINS_FILE = "model-pins"  # per gateway worker and model: requests that resolved to the model and are not answered
WARM_FILE = "model-warm"  # per gateway worker and model: 1 while the worker serves the model


def pinned_names(config: EmbentoConfig) -> list[str]:
    """The columns of the pins and warm tables: the configured models, in order, then the slots of the models added
    at run time (`ModelSet.column`)."""
    return [m.served_model_name for m in config.models] + [added_column(slot) for slot in range(ADDED_SLOTS)]


def added_column(slot: int) -> str:
    return f"added model {slot}"  # never a served name: those are checked against the set's own


class Pins:
    """The model services' view of the gateways' pins: a model pinned by a request is never evicted. A gateway pins
    and reads the wanted set under the table's lock, and an eviction checks the pins and marks the model unwanted
    under it too: a request either pins first (and the model stays) or sees it unwanted (and loads it again)."""

    def __init__(self, config: EmbentoConfig, shared: SharedModelSet | None = None) -> None:
        """`shared`: the set that names the columns of models added at run time."""
        names = pinned_names(config)
        self._columns = {name: column for column, name in enumerate(names)}
        self._table = SharedTable(PINS_FILE, SLOTS, len(names))
        self._shared = shared

    @contextmanager
    def locked(self) -> Iterator[Callable[[str], int]]:
        """Inside: how many requests pin a model, with no gateway pinning in between."""
        with self._table.locked() as table:
            yield lambda name: self._pinned(table, name)

    def _pinned(self, table: np.ndarray, name: str) -> int:
        """A model's pins: by its column, an added model's slot (none for one removed: nothing pins it now)."""
        column = self._columns.get(name)
        if column is None and self._shared is not None:
            column = self._columns.get(self._shared.read().column(name))
        return 0 if column is None else int(table[:, column].sum())
