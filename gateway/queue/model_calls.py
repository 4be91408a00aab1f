"""The model services as the engine sees them: rows in, one output per row back, or a clear error.

Each model service (`KindSpec.model_service`) gets its admission (the queue bounds), its coalescer (concurrent
requests leave as one call) and its client, the Gateway's BentoML dependency; and a second coalescer for live queries,
sent to its live API (`KindSpec.live_api`) for the models it runs beside its batches (`ModelInfo.live_lane`).
A request abandoned at its deadline or by its client is cancelled on the service; a call left unanswered past its time
is sent again (gateway/queue/resend.py).

Bulk-job lines (the batch class, gateway/queue/priority.py) wait for idle capacity instead: no queue bound refuses
them and no deadline cuts them (their job's window does), and they never take an interactive request's room.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import aiohttp
import bentoml
import numpy as np

from config import errors
from config.settings import EmbentoConfig
from gateway.metrics import (
    ABANDONED,
    QUEUE_WAIT,
    QUEUED_BY_CLASS,
    REQUESTS_PER_CALL,
    RESENT_CALLS,
    current_trace,
    start_series,
)
from gateway.queue.admission import Admission
from gateway.queue.coalesce import BatchSlot, Coalescer
from gateway.queue.deadline import until_done
from gateway.queue.priority import JOB_CLASSES, PRIORITY, Priority
from gateway.queue.resend import CallTimes, first_answer
from gateway.shared_memory import SharedCounters
from models.base import NOT_LOADED, Kind, ModelInfo, Row
from models.batching import BatchLimits, PassCost, pass_budget_ms, pass_overhead_tokens, plan_batches
from models.kinds import spec
from shared_metrics import DROPPED_INPUTS

logger = logging.getLogger(__name__)
CANCEL_TIMEOUT_S = 5
GPU_CALLS_IN_FLIGHT = 2
COST_TRIES = 2  # calls of each size timed at warm-up; the fastest counts (the others met a busy host)
CPU_COST_TOKENS = 1024  # the larger timed call on a CPU: a tenth of a second for MiniLM


class ModelCalls:
    """Calls to the model services of the served `kinds`; `clients` maps each service's name to its client."""

    def __init__(
        self,
        config: EmbentoConfig,
        kinds: Iterable[Kind],
        clients: Mapping[str, Any],
        dispatch_rows: int,
        counters: SharedCounters | None = None,
    ) -> None:
        self.config = config
        self.clients = clients
        self.dispatch_rows = dispatch_rows
        self.apis = {spec(kind).model_service: spec(kind).service_api for kind in kinds}  # the batchable API
        self.live_apis = {spec(kind).model_service: spec(kind).live_api for kind in kinds}
        self.admission = {
            name: Admission(name, config.max_queued_items, config.max_queued_tokens, counters) for name in self.apis
        }
        start_series(list(self.apis), config.max_queued_items, config.max_queued_tokens)
        self.pass_limits: dict[str, BatchLimits] = {}  # per served model, from its service at warm-up (`learn`)
        self.pass_costs: dict[str, PassCost] = {}  # per served model, timed at warm-up (`learn_cost`)
        self.budgets_s: dict[str, float] = {}  # per served model: how long a call may take beside live work
        self.coalescers = {
            name: Coalescer(
                functools.partial(self._call_service, name),
                dispatch_rows,
                _count_dropped,
                one_pass=self._fits_one_pass,
                batch_slot=BatchSlot(counters, name) if counters else None,
                within_budget=self._within_budget,
                waited=functools.partial(_count_wait, name),
            )
            for name in self.apis
        }
        # Live queries for the models a service runs beside its batches (`ModelInfo.live_lane`): coalesced apart, sent
        # at once whatever the batchable API has in flight.
        self.live_coalescers = {
            name: Coalescer(
                functools.partial(self._call_service, name, live=True),
                dispatch_rows,
                _count_dropped,
                waited=functools.partial(_count_wait, name),
            )
            for name in self.apis
        }
        self.call_times = {name: CallTimes() for name in self.apis}  # when a call is overdue
        self._cancelling: set[asyncio.Task] = set()

    async def run(self, info: ModelInfo, rows: Sequence[Row]) -> list[np.ndarray]:
        """A request's rows through its model's service, admitted and under its deadline (their tokens within
        `max_request_tokens`: the engine checks them before, `gateway.validation.check_request_tokens`)."""
        tokens = sum(row.length for row in rows)
        request_id = uuid.uuid4().hex
        for row in rows:
            row.request_id = request_id
        trace = current_trace()
        trace.sending(len(rows), tokens)
        service, priority = info.spec.model_service, PRIORITY.get().of_request(len(rows), tokens)
        parts = request_parts(rows, info)
        try:
            with self._queued(service, priority, len(rows), tokens):
                answered = await until_done(
                    self._in_parts(
                        self._coalescer(info, priority), [[rows[i] for i in part] for part in parts], priority
                    ),
                    None if priority.batch else self.config.request_timeout_s,
                )
        except (errors.RequestTimeout, errors.ClientGone) as exc:
            self._abandon(service, request_id, "deadline" if isinstance(exc, errors.RequestTimeout) else "disconnect")
            raise
        trace.answered = time.perf_counter()
        return checked(in_request_order(parts, answered))

    @contextlib.contextmanager
    def _queued(self, service: str, priority: Priority, items: int, tokens: int) -> Iterator[None]:
        """An interactive request holds its room in the admission bounds (or is refused); a bulk-job line is
        only counted."""
        if not priority.batch:
            with self.admission[service].admit(items, tokens):
                yield
            return
        gauge = QUEUED_BY_CLASS.labels(model_service=service, job_class="batch")
        gauge.inc(items)
        try:
            yield
        finally:
            gauge.dec(items)

    def _coalescer(self, info: ModelInfo, priority: Priority) -> Coalescer:
        """Where a request waits: a live query for a model its service runs beside its batches apart, else with the
        others."""
        service = info.spec.model_service
        return self.live_coalescers[service] if priority.live and info.live_lane else self.coalescers[service]

    @staticmethod
    async def _in_parts(coalescer: Coalescer, parts: list[list[Row]], priority: Priority) -> list[np.ndarray]:
        """A request's rows in pass-sized parts, each queued once the one before it is under way (as many at
        once as the service takes calls): other requests' rows join the queue between a long request's parts
        instead of waiting behind all of it."""
        if len(parts) == 1:
            return await coalescer.run(parts[0], priority=priority)
        in_flight = asyncio.Semaphore(coalescer.max_calls)
        queued: set[int] = set()

        async def run(index: int) -> list[np.ndarray]:
            async with in_flight:
                queued.add(index)
                return await coalescer.run(parts[index], alone=True, priority=priority)

        tasks = [asyncio.ensure_future(run(index)) for index in range(len(parts))]
        try:
            answered = await asyncio.gather(*tasks)
        except BaseException:  # the first failure is the request's; its other parts need not run
            for task in tasks:
                task.cancel()
            for index in set(range(len(parts))) - queued:  # the coalescer counts the queued ones it drops
                _count_dropped(parts[index])
            raise
        return [output for outputs in answered for output in outputs]

    async def send(self, info: ModelInfo, rows: list[Any]) -> list[np.ndarray]:
        """Rows straight to the service (warm-up and calibration): no admission, no deadline."""
        return checked(await self.coalescers[info.spec.model_service].run(rows))

    def learn(self, info: ModelInfo) -> None:
        """A loaded model's facts: on a GPU its service gets more calls in flight (see gateway/queue/coalesce.py), its
        pass limits bound the service's bulk-job calls, and its pass time budget the calls beside live work."""
        service, name = info.spec.model_service, info.served_model_name
        if info.device != "cpu":
            self.coalescers[service].max_calls = GPU_CALLS_IN_FLIGHT
        if info.pass_limits is not None:
            self.pass_limits[name] = info.pass_limits
        self.budgets_s[name] = (info.pass_budget_ms or pass_budget_ms(None, info.device)) / 1000

    async def learn_cost(self, info: ModelInfo, short: Row, long: Row) -> PassCost | None:
        """The model's `PassCost`, from a call of the `short` row alone and one of a pass of `long` rows (its pass
        limits' tokens, at most `CPU_COST_TOKENS` on a CPU), each timed `COST_TRIES` times (at warm-up, before the
        model serves). None when the two do not tell (a host too busy): its calls are then not cut to the budget."""
        tokens = info.pass_limits.max_batch_tokens if info.pass_limits else CPU_COST_TOKENS
        if info.device == "cpu":
            tokens = min(tokens, CPU_COST_TOKENS)
        many = max(2, tokens // max(long.length, 1))
        small, large = [
            min([await self._timed(info, rows) for _ in range(COST_TRIES)]) for rows in ([short], [long] * many)
        ]
        cost = PassCost.fitted((short.length, small), (long.length * many, large))
        if cost is None:
            logger.warning(
                "model '%s': a call of %d rows took no longer than one (%.1f ms); its calls are not cut to the pass "
                "time budget beside live queries",
                info.served_model_name,
                many,
                large * 1000,
            )
            return None
        self.pass_costs[info.served_model_name] = cost
        logger.info(
            "model '%s': a call takes %.1f ms + %.3f ms per padded token; beside live queries, a call carries %.0f "
            "ms of work at most",
            info.served_model_name,
            cost.call_s * 1000,
            cost.token_s * 1000,
            self.budgets_s[info.served_model_name] * 1000,
        )
        return cost

    async def _timed(self, info: ModelInfo, rows: list[Row]) -> float:
        started = time.perf_counter()
        await self.send(info, rows)
        return time.perf_counter() - started

    def _within_budget(self, rows: list[Row]) -> bool:
        """Whether the work of a call of `rows` (beyond the fixed cost of any call) takes at most its models' pass
        time budget, by their costs (unknown: yes). On a 2-core host a call's fixed cost (the hop, the launch) was as
        long as a GPU's 10 ms budget: bounding the whole call cut every call to one row."""
        by_model: dict[str, list[int]] = {}
        for row in rows:
            by_model.setdefault(row.model, []).append(row.length)
        known = [name for name in by_model if name in self.pass_costs]
        if not known:
            return True
        seconds = sum(self.pass_costs[name].work_seconds(by_model[name]) for name in known)
        return seconds <= min(self.budgets_s[name] for name in known)

    def _fits_one_pass(self, rows: list[Row]) -> bool:
        """Whether `rows` make at most one pass of each of their models (by its limits, learned at warm-up; before,
        at most one call's rows)."""
        by_model: dict[str, list[int]] = {}
        for row in rows:
            by_model.setdefault(row.model, []).append(row.length)
        return all(
            len(lengths) <= self.dispatch_rows
            if model not in self.pass_limits
            else self.pass_limits[model].fits(lengths)
            for model, lengths in by_model.items()
        )

    def _abandon(self, service: str, request_id: str, reason: str) -> None:
        """Nobody waits for this request any more: its model service drops whatever of it is still queued."""
        ABANDONED.labels(model_service=service, reason=reason).inc()

        async def cancel() -> None:
            try:
                await asyncio.wait_for(self.clients[service].to_async.cancel([request_id]), CANCEL_TIMEOUT_S)
            except Exception as exc:  # the rows then run and are thrown away; nothing else is lost
                logger.warning("could not cancel a request on the %s service: %r", service, exc)

        task = asyncio.create_task(cancel())
        self._cancelling.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._cancelling.discard)

    async def _call_service(self, service: str, rows: list[Any], live: bool = False) -> list[np.ndarray]:
        """One call to a model service's batchable API, or its live API (the coalescers' `send`); its failures as our
        errors.
        Sent again when overdue (gateway/queue/resend.py): a replica that stopped answering is routed around."""
        REQUESTS_PER_CALL.labels(model_service=service).observe(len({row.request_id for row in rows}))
        tokens, times = sum(row.length for row in rows), self.call_times[service]

        def resent(waiting: int) -> None:
            RESENT_CALLS.labels(model_service=service).inc()
            logger.warning("a call to the %s service is overdue (%d attempts waiting); sent again", service, waiting)

        try:
            overdue_s = times.overdue_after(tokens, self.config.model_call_resend_s)
            attempt = functools.partial(self._attempt, service, rows, tokens, live)
            return await first_answer(attempt, overdue_s, resent)
        except bentoml.exceptions.BentoMLException as exc:
            if exc.error_code.value in (429, 503):
                raise errors.Overloaded("the model service is overloaded; retry later") from exc
            raise errors.InferenceError(f"the model service failed: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise errors.NotReady(f"the model service is unavailable ({type(exc).__name__}); retry shortly") from exc

    async def _attempt(self, service: str, rows: list[Any], tokens: int, live: bool) -> list[np.ndarray]:
        """One attempt at a call, timed for `CallTimes`. Sent again at once when the connection broke: the model
        service may have closed a kept-alive connection as it was reused (bentoml #4971), or restarted."""
        call = getattr(self.clients[service].to_async, (self.live_apis if live else self.apis)[service])
        started = time.perf_counter()
        try:
            outputs = await call(rows)
        except aiohttp.ClientConnectionError as exc:
            logger.warning("connection to the %s service broke (%r); sending again", service, exc)
            outputs = await call(rows)
        self.call_times[service].observe(tokens, time.perf_counter() - started)
        return outputs


def request_parts(rows: Sequence[Row], info: ModelInfo) -> list[list[int]]:
    """A request's rows (their indices) in parts of one pass each, cut as the model service cuts its passes
    (`plan_batches`, with the model's pass limits): each part is queued on its own, so other requests' rows get in
    between a long request's. One part while the limits are unknown, or when all fit one pass."""
    limits, lengths = info.pass_limits, [row.length for row in rows]
    if limits is None or limits.fits(lengths):
        return [list(range(len(rows)))]
    return plan_batches(lengths, limits.batch_size, limits.max_batch_tokens, pass_overhead_tokens(info.device))


def in_request_order(parts: list[list[int]], answered: list[np.ndarray]) -> list[np.ndarray]:
    """The parts' outputs (one after the other) back in the order of the request's rows."""
    outputs: list[np.ndarray] = [np.empty(0)] * len(answered)
    for index, output in zip((i for part in parts for i in part), answered, strict=True):
        outputs[index] = output
    return outputs


def checked(outputs: list[np.ndarray]) -> list[np.ndarray]:
    """The outputs, unless the model failed on some input (`runners.pool.FAILED`) or answered NaN or inf.
    A sparse output with no active entry is (2, 0), not a failure."""
    if any(output.dtype == NOT_LOADED.dtype and output.shape == (0,) for output in outputs):
        raise errors.NotReady("the model was unloaded while this request ran; retry shortly")
    failed = [i for i, output in enumerate(outputs) if output.shape == (0,) or not np.isfinite(output).all()]
    if failed:
        raise errors.InferenceError(
            f"the model failed on input(s) {failed[:10]} (an error, or NaN/inf output); see the server log"
        )
    return outputs


def _count_wait(service: str, job_class: int, seconds: float) -> None:
    QUEUE_WAIT.labels(model_service=service, job_class=JOB_CLASSES[job_class]).observe(seconds)


def _count_dropped(rows: list[Row]) -> None:
    """An abandoned request's rows that never reached the model service count as dropped, as those that did."""
    DROPPED_INPUTS.labels(model=rows[0].model).inc(len(rows))
