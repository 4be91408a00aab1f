"""The model-running core every model service shares.

A model service's batch holds rows from many requests and several models. `ModelPool` groups them by model,
sorts by length, cuts passes by count and token budget (on CPU, a big batch as one pass per core at the same
time), and answers in request order. A pass that fails is bisected, so one bad input never fails the rows it
shared a batch with. Rows of requests the gateway has given up on (deadline, disconnect) are dropped before
each pass instead of computed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

import bentoml
import numpy as np

from bento.packaging.exports import adopt_carried_export
from bento.serving.patches import drain_before_shutdown
from bento.serving.process_memory import report_process_memory
from config.served import served_config
from config.settings import ModelConfig
from models.base import NOT_LOADED, ModelInfo, PendingOutputs, Row, TokenModel
from models.batching import (
    BatchLimits,
    activation_bytes_per_token,
    batch_limits,
    pass_budget_ms,
    pass_overhead_tokens,
    plan_batches,
    run_isolated,
)
from models.inference.auto_backend import load_model
from models.inference.host import set_cpu_threads
from models.inference.lanes import Lanes, shares_cores
from models.inference.memory import HeapTrimmer, release_memory
from models.resolve import resolve_model
from runners.loading import load_models
from runners.service_config import allow_partial, cpu_threads, models_of_service, placed
from server_state.kept_models import server_model_set
from server_state.model_set import ModelSet
from shared_metrics import DROPPED_INPUTS

logger = logging.getLogger(__name__)
FAILED = np.empty(0, dtype=np.float32)  # an input the model could not run (or dropped); the gateway reports it
Loader = Callable[[Path, ModelConfig], TokenModel]
# An abandoned request's id is kept this long: its rows may still be on their way, or queued behind others.
ABANDONED_TTL_S = 600.0
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, float("inf"))
FORWARD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, float("inf"))

COMPUTED_INPUTS = bentoml.metrics.Counter(
    name="embento_model_inputs",
    documentation="Inputs a model ran",
    labelnames=["model"],
)
COMPUTED_TOKENS = bentoml.metrics.Counter(
    name="embento_model_tokens",
    documentation="Tokens (or media positions) a model ran",
    labelnames=["model"],
)
FAILED_INPUTS = bentoml.metrics.Counter(
    name="embento_model_failed_inputs",
    documentation="Inputs a model failed on, alone",
    labelnames=["model"],
)
PASS_SIZE = bentoml.metrics.Histogram(
    name="embento_model_batch_size",
    documentation="Inputs per forward pass",
    labelnames=["model"],
    buckets=BATCH_BUCKETS,
)
PASS_SECONDS = bentoml.metrics.Histogram(
    name="embento_model_forward_seconds",
    documentation="Seconds per forward pass",
    labelnames=["model"],
    buckets=FORWARD_BUCKETS,
)


class ModelPool:
    def __init__(
        self, load: Loader, configs: list[ModelConfig], allow_partial: bool = False, threads: int | None = None
    ) -> None:
        # All torch work happens on this one thread. OpenMP gives every calling thread its own team of
        # workers; a second team (say, warm-up on the main thread, forwards on BentoML's worker threads)
        # oversubscribes the cores, and libgomp then stops spinning: a MiniLM forward took 2x as long.
        self._torch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch")
        self._load = load
        if threads is not None:  # on the thread that runs the models: OpenMP keeps the count per thread
            self._torch_thread.submit(set_cpu_threads, threads).result()
        self.models: dict[str, TokenModel]
        self.failed: dict[str, str]  # served name -> why it did not load (with allow_partial)
        self.models, self.failed = self._torch_thread.submit(
            load_models, configs, partial(_load_one, load), allow_partial
        ).result()
        # Batches big enough run as one pass per core (see models/inference/lanes.py); the rest on the torch thread.
        sharing = any(shares_cores(model.info) for model in self.models.values())
        self._lanes = Lanes(threads if threads and sharing else 1)
        # Live queries' calls run here, beside the batch in progress (`run(live=True)`): one intra-op thread, as a
        # lane's, so the cores are shared three ways for the few milliseconds a query takes, never oversubscribed.
        self._live_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live")
        self._live_thread.submit(set_cpu_threads, 1).result()
        self._batches = 0  # calls in flight on the torch thread
        # Request id -> when it was abandoned. Written on the event loop, read on the torch thread: single
        # dict operations are atomic, and only the event loop iterates it.
        self._abandoned: dict[str, float] = {}
        self._heap = HeapTrimmer()
        self._running = 0
        self._last_done = time.monotonic()
        # Per model: calls holding its rows now, and when it was last used, in the order of uses (the model
        # service's residency reads them to tell idle models from busy ones, and the least recently used).
        self._busy: Counter[str] = Counter()
        self._uses = itertools.count(1)
        self._last_use = {name: next(self._uses) for name in self.models}
        drain_before_shutdown(self.idle_seconds)

    def idle_seconds(self) -> float:
        """How long the pool has had nothing to run (0 while it runs)."""
        return 0.0 if self._running else time.monotonic() - self._last_done

    def report(self) -> dict:
        """The loaded models' facts, and why any others failed to load."""
        return {"models": [model.info.to_dict() for model in self.models.values()], "failed": self.failed}

    def load(self, cfg: ModelConfig) -> ModelInfo:
        """One more model, loaded while the others serve, on the thread that runs them (as at start); what it
        raised if it failed, the others untouched. Loading a served name again replaces its model, and gives
        the replaced one's memory back."""
        model = self._torch_thread.submit(_load_one, self._load, cfg).result()
        name = cfg.served_model_name
        replaced = self.models.get(name)
        self.models[name] = model
        self._last_use[name] = next(self._uses)
        self.failed.pop(name, None)
        if replaced is not None:
            del replaced
            self._torch_thread.submit(release_memory).result()
        return model.info

    def unload(self, name: str) -> None:
        """A model dropped, and its memory given back once the passes running on it end: rows for it that
        arrive later fail as an unknown model's. KeyError for a model not loaded."""
        del self.models[name]
        # Queued behind any pass under way: the model is collected once that pass lets go of it.
        self._torch_thread.submit(release_memory).result()

    def cancel(self, request_ids: list[str]) -> None:
        """Drop these requests' rows that have not run yet, now or when they arrive."""
        now = time.monotonic()
        for request_id in request_ids:
            self._abandoned[request_id] = now
        while self._abandoned:  # oldest first: dicts keep insertion order
            oldest = next(iter(self._abandoned))
            if now - self._abandoned[oldest] < ABANDONED_TTL_S:
                break
            del self._abandoned[oldest]

    def busy(self, name: str) -> int:
        """Calls with rows of this model that have not answered yet."""
        return self._busy[name]

    def last_use(self, name: str) -> int:
        """When the model was last used (loaded, or a call with its rows answered), as a rank: later is larger."""
        return self._last_use.get(name, 0)

    async def run(self, rows: list[Row], live: bool = False) -> list[np.ndarray]:
        """One output per row. `live`: a live query's call, on its own thread beside the batch in progress, so that
        it waits for no pass of another call (for models whose passes share the cores, `ModelInfo.live_lane`); it
        takes the lanes only while no batch runs."""
        self._running += 1
        names = {row.model for row in rows}
        self._busy.update(names)
        lanes = not live or not self._batches
        self._batches += not live
        try:
            thread = self._live_thread if live else self._torch_thread
            return await asyncio.get_running_loop().run_in_executor(thread, self._run_rows, rows, lanes)
        finally:
            self._running -= 1
            self._batches -= not live
            self._busy.subtract(names)
            self._last_use.update((name, next(self._uses)) for name in names)
            self._last_done = time.monotonic()

    def _run_rows(self, rows: list[Row], lanes: bool = True) -> list[np.ndarray]:
        results: list[np.ndarray] = [FAILED] * len(rows)
        # By model, and by task adapter within one (`TokenizedText.task`): rows of different adapters never share
        # a pass, so each task's rows make whole passes of their own.
        by_model: dict[tuple[str, str | None], list[int]] = defaultdict(list)
        for index, row in enumerate(rows):
            by_model[row.model, getattr(row, "task", None)].append(index)
        for (name, _), indices in by_model.items():
            outputs = self._run_model(name, [rows[i] for i in indices], lanes)
            for index, output in zip(indices, outputs):
                results[index] = _answer(output)
        if lanes:  # on one thread at a time: the torch thread, or the live one while it has the lanes
            self._heap.after_work()
        return results

    def _run_model(self, name: str, rows: list[Row], lanes: bool = True) -> list[np.ndarray | Exception]:
        """One model's rows: passes cut by count and token budget, each bisected if it fails; across the cores'
        lanes if `lanes` and the model shares them, else on the calling thread."""
        model = self.models.get(name)
        if model is None:  # unloaded as they travelled, or never configured: the gateway says which
            logger.warning("rows for model '%s', which this worker does not hold, reached the model service", name)
            return [NotLoaded(name)] * len(rows)
        outputs: list[np.ndarray | Exception] = [FAILED] * len(rows)
        live = self._live(name, rows, range(len(rows)))

        def run_part(part: list[int]) -> None:
            self._run_passes(name, model, rows, [live[i] for i in part], outputs)

        if lanes and shares_cores(model.info):
            self._lanes.run(run_part, [rows[i].length for i in live])
        else:
            run_part(list(range(len(live))))
        return outputs

    def _run_passes(
        self, name: str, model: TokenModel, rows: list[Row], indices: list[int], outputs: list[np.ndarray | Exception]
    ) -> None:
        """These rows of one model in passes cut by count and token budget, their outputs into `outputs`.

        A model that can `launch` (on a GPU) has every pass queued before the first is waited for: the host
        collates and launches pass k+1 while the device runs pass k, and waits once, at the end. A pass that
        fails, at launch or on the device, is run again the plain way, bisected."""
        # From the model in hand: a model loaded or dropped meanwhile changes nothing here.
        batch_size, max_tokens = model.info.batch_size, model.info.max_batch_tokens
        overhead = pass_overhead_tokens(model.info.device)
        launch = getattr(model, "launch", None) if model.info.device != "cpu" else None
        launched: list[tuple[list[int], float, PendingOutputs]] = []
        for chunk in plan_batches([rows[i].length for i in indices], batch_size, max_tokens, overhead):
            live = self._live(name, rows, [indices[i] for i in chunk])  # some may have been abandoned since
            if not live:
                continue
            started = time.perf_counter()
            try:
                pending = launch([rows[i] for i in live]) if launch else None
            except Exception:
                pending = None
            if pending is None:
                self._run_now(name, model, rows, live, outputs, started)
            else:
                launched.append((live, started, pending))
        busy_from = 0.0
        for live, started, pending in launched:
            try:
                done: list[np.ndarray | Exception] = list(pending.wait())
            except Exception:
                self._run_now(name, model, rows, live, outputs, time.perf_counter())
                continue
            finished = time.perf_counter()  # the device ran this pass from when the previous one ended
            self._observe(name, [rows[i] for i in live], done, finished - max(started, busy_from))
            busy_from = finished
            for index, output in zip(live, done):
                outputs[index] = output

    def _run_now(
        self,
        name: str,
        model: TokenModel,
        rows: list[Row],
        live: list[int],
        outputs: list[np.ndarray | Exception],
        started: float,
    ) -> None:
        done = run_isolated(lambda part: model.forward([rows[i] for i in part]), live)
        self._observe(name, [rows[i] for i in live], done, time.perf_counter() - started)
        for index, output in zip(live, done):
            outputs[index] = output

    def _live(self, model: str, rows: list[Row], indices: Iterable[int]) -> list[int]:
        """The indices whose requests are still awaited; the others count as dropped."""
        indices = list(indices)
        live = [i for i in indices if rows[i].request_id not in self._abandoned]
        if len(live) < len(indices):
            DROPPED_INPUTS.labels(model=model).inc(len(indices) - len(live))
        return live

    @staticmethod
    def _observe(model: str, rows: list[Row], outputs: list[np.ndarray | Exception], seconds: float) -> None:
        COMPUTED_INPUTS.labels(model=model).inc(len(rows))
        COMPUTED_TOKENS.labels(model=model).inc(sum(row.length for row in rows))
        PASS_SIZE.labels(model=model).observe(len(rows))
        PASS_SECONDS.labels(model=model).observe(seconds)
        failed = sum(isinstance(output, Exception) for output in outputs)
        if failed:
            FAILED_INPUTS.labels(model=model).inc(failed)


class NotLoaded(LookupError):
    """Rows for a model this worker does not hold."""


def _answer(output: np.ndarray | Exception) -> np.ndarray:
    if isinstance(output, NotLoaded):
        return NOT_LOADED
    return FAILED if isinstance(output, Exception) else output


def pool_for(service: str) -> ModelPool:
    """A model service's pool: the models it runs that the server's wanted set holds at the start (the configured
    eager ones, or as kept across a restart: server_state/kept_models.py), each in its kind's class
    (`KindSpec.loader`), under the server's settings (the others load later: runners/residency.py)."""
    held = _held_at_start()
    eager = [cfg for cfg in placed(models_of_service(service), service) if cfg.served_model_name in held]
    pool = ModelPool(load_model, eager, allow_partial(), cpu_threads())
    for cfg in models_of_service(service):  # at zero from the start, so rates and alerts see the series at once
        for counter in (COMPUTED_INPUTS, COMPUTED_TOKENS, FAILED_INPUTS, DROPPED_INPUTS):
            counter.labels(model=cfg.served_model_name)
    report_process_memory(service)  # once loaded: a worker whose load fails exits with nothing to report
    return pool


def _held_at_start() -> set[str]:
    """The models the wanted set holds now, at this worker's start: the configuration's eager ones outside a server
    (nothing kept to read there)."""
    config = served_config()
    shared = server_model_set(config)
    wanted = shared.read() if shared is not None else ModelSet.configured(config)
    return {name for name, entry in wanted.models.items() if entry.loaded}


def _load_one(load: Loader, cfg: ModelConfig) -> TokenModel:
    logger.info("loading %s as '%s'", cfg.model_id, cfg.served_model_name)
    folder = resolve_model(cfg.model_id, cfg.revision)
    adopt_carried_export(cfg, folder)
    model = load(folder, cfg)
    budget = pass_budget_ms(cfg.pass_budget_ms, model.info.device)
    limits = asdict(pass_limits(cfg, folder, model.info))
    model.info = replace(model.info, **limits, pass_budget_ms=budget, live_lane=shares_cores(model.info))
    logger.info("model '%s' is warm: %s", cfg.served_model_name, model.info)
    return model


def pass_limits(cfg: ModelConfig, folder: Path, info: ModelInfo) -> BatchLimits:
    """The configured pass limits, or the device's (models/batching.py)."""
    if cfg.batch_size and cfg.max_batch_tokens:
        return BatchLimits(cfg.batch_size, cfg.max_batch_tokens)
    free = per_token = None
    if info.device.startswith("cuda"):  # a GPU's free memory sizes them; torch is loaded there anyway
        from models.inference.device import DTYPE_BYTES, free_memory

        free = free_memory(info.device)
        per_token = activation_bytes_per_token(folder, DTYPE_BYTES.get(info.dtype, 4)) if free else None
    return batch_limits(cfg.batch_size, cfg.max_batch_tokens, info.device, free, per_token)


class PooledService:
    """The APIs every model service has beside its batchable one; subclasses set `pool`."""

    pool: ModelPool

    @bentoml.api
    def model_info(self) -> dict:
        return self.pool.report()

    @bentoml.api
    async def cancel(self, request_ids: list[str]) -> None:
        """The gateway gave up on these requests (deadline, or the client left): drop their queued rows."""
        self.pool.cancel(request_ids)
