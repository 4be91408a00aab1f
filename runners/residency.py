"""Which models one model-service worker holds: the wanted set (server_state/model_set.py) brought about in its pool.

Each step: models no longer wanted are unloaded; a model idle past its `keep_alive` is evicted (and marked unwanted,
so that the next request for it loads it again); a wanted model not held is loaded, after evicting the least
recently used idle models its budget needs (`max_loaded_models`, `max_loaded_bytes`). A model with requests in flight
(pinned by a gateway from when the request named it to its answer: server_state/model_set.py's `Pins`, or running
here) is never unloaded: when nothing idle can make room the load is refused with the figures. What the worker then
holds is written to its status file, for the gateway workers. Idle time is read on an injected clock from when the
pool's last use of the model was seen (`ModelPool.last_use`), so the policy is tested without waiting.

Each load, unload and eviction is one INFO line naming the worker, the reason (asked; idle past which `keep_alive`;
the budget, for which model) and who asked, as the wanted set records them (`Wanted.asked_by`, `keep_alive_by`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import bentoml
from bentoml._internal.context import server_context

from config.durations import duration_text
from config.errors import EmbentoError
from config.served import served_config
from config.settings import ModelConfig
from models.base import ModelInfo
from models.resolve import resolve_model
from runners.pool import ModelPool
from runners.service_config import model_service_of, models_of_service, placed
from server_state.kept_models import server_model_set
from server_state.model_set import ModelSet, ModelStatus, Pins, SharedModelSet

logger = logging.getLogger(__name__)
STEP_EVERY_S = 0.1  # how soon a worker sees a change of the wanted set
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt", ".pth")
LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, float("inf"))

LOADS = bentoml.metrics.Counter(
    name="embento_model_loads",
    documentation="Models loaded at run time, by outcome (loaded, failed, refused: no room in the budget)",
    labelnames=["model", "outcome"],
)
UNLOADS = bentoml.metrics.Counter(
    name="embento_model_unloads",
    documentation="Models unloaded at run time, by reason (unloaded: asked; idle: past keep_alive; budget: evicted)",
    labelnames=["model", "reason"],
)
LOAD_SECONDS = bentoml.metrics.Histogram(
    name="embento_model_load_seconds",
    documentation="Seconds a run-time load took",
    labelnames=["model"],
    buckets=LOAD_BUCKETS,
)


@dataclass(frozen=True)
class Budget:
    """What one worker may hold: models, bytes of weights (None: no limit)."""

    max_models: int | None = None
    max_bytes: int | None = None

    def fits(self, models: int, weight_bytes: int) -> bool:
        return (self.max_models is None or models <= self.max_models) and (
            self.max_bytes is None or weight_bytes <= self.max_bytes
        )


@dataclass(frozen=True)
class Held:
    """A loaded model as the budget sees it."""

    name: str
    weight_bytes: int
    last_use: int  # `ModelPool.last_use`: the smallest is the least recently used
    busy: int


def room_for(weight_bytes: int, held: list[Held], budget: Budget) -> list[str]:
    """The models to evict, least recently used first, so that one more of `weight_bytes` fits; ValueError with the
    figures when evicting every idle model would not make room."""
    kept = sorted(held, key=lambda h: h.last_use)
    evicted: list[str] = []
    idle = [h for h in kept if not h.busy]
    while not budget.fits(len(kept) + 1, sum(h.weight_bytes for h in kept) + weight_bytes):
        if not idle:
            raise ValueError(
                f"the budget ({_budget_text(budget)}) cannot hold {weight_bytes:,} more bytes of weights: "
                f"{len(kept)} loaded hold {sum(h.weight_bytes for h in kept):,} bytes, and none left can go "
                f"(with calls in flight: {[h.name for h in kept if h.busy] or 'none'})"
            )
        oldest = idle.pop(0)
        kept.remove(oldest)
        evicted.append(oldest.name)
    return evicted


def _budget_text(budget: Budget) -> str:
    parts = [f"max_loaded_models {budget.max_models}"] if budget.max_models is not None else []
    parts += [f"max_loaded_bytes {budget.max_bytes:,}"] if budget.max_bytes is not None else []
    return ", ".join(parts)


def weight_bytes(cfg: ModelConfig) -> int:
    """The bytes of a checkpoint's weight files: what the budget counts for it."""
    folder = resolve_model(cfg.model_id, cfg.revision)
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.suffix in WEIGHT_SUFFIXES)


class Residency:
    """Keeps one worker's pool to the wanted set (`step`, on its own thread from `start`)."""

    def __init__(
        self,
        pool: ModelPool,
        configs: list[ModelConfig],
        shared: SharedModelSet,
        pins: Pins,
        worker: str,
        budget: Budget,
        clock: Callable[[], float] = time.monotonic,
        accepts: Callable[[ModelConfig], ModelConfig | None] | None = None,
    ) -> None:
        """`accepts`: a model added at run time as this worker takes it (placed on its device), or None when
        another model service runs its kind; without it, the configured models alone."""
        self.pool = pool
        self.configs = {cfg.served_model_name: cfg for cfg in configs}
        self.shared = shared
        self.pins = pins
        self.worker = worker
        self.budget = budget
        self.clock = clock
        self.statuses: dict[str, ModelStatus] = {name: ModelStatus("unloaded") for name in self.configs}
        self._seen_uses: dict[str, int] = {}
        self._idle_since: dict[str, float] = {}
        for name, model in pool.models.items():
            self._held(name, model.info, None)
        for name, reason in pool.failed.items():
            self.statuses[name] = ModelStatus("failed", reason)
        for name in self.configs:
            _count_from_zero(name)
        self._accepts = accepts
        self._added: set[str] = set()  # the models added at run time this worker has taken on
        self._not_ours: set[str] = set()  # and those another service runs
        self._reported: list[dict] = []
        self._stop = threading.Event()

    def start(self) -> None:
        self._report()
        threading.Thread(target=self._keep_stepping, name="residency", daemon=True).start()

    def _keep_stepping(self) -> None:
        while not self._stop.wait(STEP_EVERY_S):
            try:
                self.step()
            except Exception:  # a bad step must not end the thread: the next one tries again
                logger.exception("the model residency step failed")

    def step(self) -> None:
        """One pass: unload the unwanted, evict the idle past keep_alive, load the wanted."""
        wanted = self.shared.read()
        self._follow_added(wanted)
        pinned = self._pinned()
        self._note_uses(pinned)
        for name in [n for n in self.pool.models if n in self.configs]:
            entry = wanted.models.get(name)
            if entry is None or not entry.loaded:
                self._drop(name, "unloaded", f"asked by {_who(entry.asked_by if entry else None)}")
            elif entry.keep_alive_s is not None and (idle := self._idle_for(name, pinned)) >= entry.keep_alive_s:
                set_by = f"set by {entry.keep_alive_by}" if entry.keep_alive_by else "configured"
                why = f"idle for {idle:.1f} s, past its keep_alive of {duration_text(entry.keep_alive_s)} ({set_by})"
                self._drop(name, "idle", why)
        for name in self.configs:
            entry = self.shared.read().models.get(name)  # afresh: an eviction above or a load before may change it
            if entry is not None and entry.loaded and name not in self.pool.models:
                self._load(name, _who(entry.asked_by))
        self._report()

    def _follow_added(self, wanted: ModelSet) -> None:
        """The models added at run time that this service runs: a new one taken on (and loaded below, as any model
        wanted loaded), one removed forgotten once this worker no longer holds it."""
        if self._accepts is None:
            return
        for name, added in wanted.added.items():
            if name not in self.configs and name not in self._not_ours:
                try:
                    cfg = self._accepts(added.config())
                except Exception as exc:  # its kind cannot be told (a checkpoint gone since): once, not every step
                    logger.error("model '%s' added at run time cannot be taken on: %s", name, exc)
                    cfg = None
                if cfg is None:
                    self._not_ours.add(name)
                    continue
                self.configs[name], self.statuses[name] = cfg, ModelStatus("unloaded")
                self._added.add(name)
                _count_from_zero(name)
        for name in [n for n in self._added if n not in wanted.added and n not in self.pool.models]:
            del self.configs[name], self.statuses[name]
            self._added.discard(name)
        self._not_ours &= set(wanted.added)  # a name removed, then added again, may be of another kind

    def _pinned(self) -> dict[str, int]:
        """Per held model, the requests in flight for it: pinned by the gateways, or running here."""
        with self.pins.locked() as pinned:
            return {name: pinned(name) + self.pool.busy(name) for name in self.pool.models if name in self.configs}

    def _note_uses(self, pinned: dict[str, int]) -> None:
        """A model's idle time starts when its last request ended, as this worker's clock saw it."""
        now = self.clock()
        for name in pinned:
            last_use = self.pool.last_use(name)
            if pinned[name] or last_use != self._seen_uses.get(name):
                self._seen_uses[name] = last_use
                self._idle_since[name] = now

    def _idle_for(self, name: str, pinned: dict[str, int]) -> float:
        return -1.0 if pinned.get(name) else self.clock() - self._idle_since.get(name, self.clock())

    def _load(self, name: str, by: str) -> None:
        cfg = self.configs[name]
        try:
            size = weight_bytes(cfg)
        except (EmbentoError, OSError) as exc:
            self._failed(
                name, exc.message if isinstance(exc, EmbentoError) else f"its checkpoint cannot be read: {exc}"
            )
            return
        try:
            evict = room_for(size, self._held_models(self._pinned()), self.budget)
        except ValueError as exc:
            self._failed(name, f"not loaded: {exc}", refused=True)
            return
        for other in evict:
            if not self._drop(other, "budget", f"room for '{name}', asked by {by}"):
                return  # a request pinned it meanwhile: the next step plans again
        self.statuses[name] = ModelStatus("loading", weight_bytes=size)
        self._report()
        started = time.perf_counter()
        try:
            info = self.pool.load(cfg)
        except Exception as exc:  # any cause: the others serve on, and the reason is reported
            self._failed(name, exc.message if isinstance(exc, EmbentoError) else f"its load failed: {exc!r}")
            return
        seconds = time.perf_counter() - started
        LOADS.labels(model=name, outcome="loaded").inc()
        LOAD_SECONDS.labels(model=name).observe(seconds)
        logger.info("model '%s' loaded in %.1f s in %s, asked by %s", name, seconds, self.worker, by)
        self._held(name, info, seconds, size)

    def _held(self, name: str, info: ModelInfo, seconds: float | None, size: int | None = None) -> None:
        size = weight_bytes(self.configs[name]) if size is None else size
        self.statuses[name] = ModelStatus("loaded", load_s=seconds, info=info.to_dict(), weight_bytes=size)
        self._seen_uses[name] = self.pool.last_use(name)
        self._idle_since[name] = self.clock()

    def _failed(self, name: str, reason: str, refused: bool = False) -> None:
        """Reported, and no longer wanted: an admin load (or, after a refusal, a request) tries again."""
        logger.error("model '%s': %s", name, reason)
        LOADS.labels(model=name, outcome="refused" if refused else "failed").inc()
        self.statuses[name] = ModelStatus("failed", reason, refused=refused)
        self.shared.change(lambda models: _unwant(models, name))

    def _drop(self, name: str, reason: str, why: str) -> bool:
        """Unload a model no request holds (else False: the next step tries again), logged with `why`. Evicted
        (`idle`, `budget`), it is marked unwanted under the pins' lock first: a request then either pinned it before
        (and it stays) or finds it unwanted (and wants it again)."""
        with self.pins.locked() as pinned:
            if pinned(name) or self.pool.busy(name):
                return False
            if reason != "unloaded":
                self.shared.change(lambda models: _unwant(models, name))
        self.pool.unload(name)
        UNLOADS.labels(model=name, reason=reason).inc()
        if reason == "unloaded":
            logger.info("model '%s' unloaded from %s, %s", name, self.worker, why)
        elif reason == "budget":
            logger.info(
                "model '%s' evicted from %s by the budget (%s): %s", name, self.worker, _budget_text(self.budget), why
            )
        else:
            logger.info("model '%s' evicted from %s: %s", name, self.worker, why)
        self.statuses[name] = ModelStatus("unloaded", reason)
        return True

    def _held_models(self, pinned: dict[str, int]) -> list[Held]:
        return [
            Held(name, self.statuses[name].weight_bytes, self.pool.last_use(name), pinned.get(name, 0))
            for name in self.pool.models
            if name in self.configs
        ]

    def _report(self) -> None:
        """The status file, rewritten when something in it changed."""
        now = [asdict(status) for status in self.statuses.values()]
        if now != self._reported:
            self.shared.write_status(self.worker, self.statuses)
            self._reported = now


def keep_resident(pool: ModelPool, service: str) -> Residency | None:
    """A model-service worker's residency, stepping on its own thread; None outside a BentoML server."""
    config = served_config()
    shared = server_model_set(config)
    if shared is None:
        return None
    worker = f"{service}-{server_context.worker_index}"
    budget = Budget(config.max_loaded_models, config.max_loaded_bytes)

    def accepts(cfg: ModelConfig) -> ModelConfig | None:
        return placed([cfg], service)[0] if model_service_of(cfg) == service else None

    residency = Residency(
        pool, placed(models_of_service(service), service), shared, Pins(config, shared), worker, budget, accepts=accepts
    )
    residency.start()
    return residency


def _count_from_zero(name: str) -> None:
    """A model's series at zero from when the worker knows it, so that rates and alerts read from the start."""
    for outcome in ("loaded", "failed", "refused"):
        LOADS.labels(model=name, outcome=outcome)
    for reason in ("unloaded", "idle", "budget"):
        UNLOADS.labels(model=name, reason=reason)
    LOAD_SECONDS.labels(model=name)


def _who(asked_by: str | None) -> str:
    """Who asked for a change, as the wanted set records it (None: the configuration, as the server started)."""
    return asked_by or "the configuration"


def _unwant(models: ModelSet, name: str) -> None:
    if name in models.models:
        models.models[name].loaded = False
