"""The jobs' worker, one per gateway process: it validates new batches, runs their lines chunk by chunk in the
model services' idle capacity, and finalizes, cancels and expires them.

Every step is claimed in the store under a lease, so the workers of every process and replica share the work,
and a step whose worker died is taken over once its lease runs out. A chunk's results are stored whole and only
by the worker still holding it (gateway/jobs/leases.py): killed at any point, a batch resumes from its first
unstored chunk and answers each line once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from config.settings import JobSettings
from gateway.jobs.answers import ENDPOINTS, LineAnswer, answer_line, output_line
from gateway.jobs.leases import ChunkLeases, StepLeases
from gateway.jobs.lines import BatchLine, parse_batch_file, problem
from gateway.jobs.metrics import BATCHES, LINES
from gateway.jobs.records import Chunk
from gateway.jobs.store import JobStore
from gateway.tenants.keys import TENANT, Keys

if TYPE_CHECKING:
    from gateway.engine import Engine

logger = logging.getLogger(__name__)
IDLE_POLL_S = 0.5  # how soon a new batch or chunk is noticed
HOUSEKEEPING_EVERY_S = 30.0  # expired files deleted, batch counts refreshed
CHUNKS_IN_FLIGHT = 2  # while one chunk's last lines run, the next one's start
STATUSES = ("validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")
RETRY_WAITS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)  # a line answered 429/503 is run again after these


class JobWorker:
    def __init__(
        self,
        store: JobStore,
        settings: JobSettings,
        engine: Engine,
        ready: Callable[[], Awaitable[bool]],
        new_work: asyncio.Event,
        keys: Keys,
    ) -> None:
        """`new_work` is set when this process creates a batch: the worker looks at once instead of at its next
        poll (other processes and replicas notice within `IDLE_POLL_S`). A batch's lines run as its tenant
        (`keys`)."""
        self.store = store
        self.steps = StepLeases(store)
        self.chunks = ChunkLeases(store)
        self.keys = keys
        self.new_work = new_work
        self.settings = settings
        self.engine = engine
        self.ready = ready
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._lines = asyncio.Semaphore(settings.lines_in_flight)
        self._tasks: list[asyncio.Task[None]] = []  # held: the event loop keeps only weak references
        self._last_housekeeping = float("-inf")
        for endpoint in ENDPOINTS:  # at zero from the start, for the rates and the dashboard
            for outcome in ("succeeded", "failed"):
                LINES.labels(endpoint=endpoint, outcome=outcome)
        for status in STATUSES:
            BATCHES.labels(status=status)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._forever(self._step)),
            *(asyncio.create_task(self._forever(self._chunk)) for _ in range(CHUNKS_IN_FLIGHT)),
        ]

    async def _forever(self, work: Callable[[], Awaitable[bool]]) -> None:
        """`work` again and again once the models serve; after a pass that found nothing, a pause."""
        while not await self.ready():
            await asyncio.sleep(1.0)
        while True:
            try:
                found = await work()
            except Exception:  # the store unreachable, say: logged, tried again
                logger.exception("bulk-job worker step failed")
                found = False
            if not found:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.new_work.wait(), IDLE_POLL_S)
                self.new_work.clear()

    async def _step(self) -> bool:
        """Housekeeping when due, then one batch's due step: validation, finalization, cancellation or expiry."""
        await self._housekeeping()
        step = await asyncio.to_thread(self.steps.claim_step, self.owner)
        if step is None:
            return False
        batch_id, status = step["id"], step["status"]
        if status in ("validating", "in_progress") and step["expires_at"] <= self.store.clock():
            await asyncio.to_thread(self.steps.finish, batch_id, self.owner, status, "expired")
        elif status == "validating":
            await self._validate(batch_id)
        elif status == "in_progress":
            if await asyncio.to_thread(self.steps.finalizing, batch_id, self.owner):
                await asyncio.to_thread(self.steps.finish, batch_id, self.owner, "finalizing", "completed")
        elif status == "finalizing":
            await asyncio.to_thread(self.steps.finish, batch_id, self.owner, "finalizing", "completed")
        else:
            await asyncio.to_thread(self.steps.finish, batch_id, self.owner, status, "cancelled")
        return True

    async def _validate(self, batch_id: str) -> None:
        record = await asyncio.to_thread(self.store.batch, batch_id)
        if record is None:
            return
        content = await asyncio.to_thread(self.steps.upload_bytes, record["input_file_id"])
        if content is None:
            parsed: list[BatchLine] = []
            problems = [
                problem(
                    "file_not_found",
                    f"the input file '{record['input_file_id']}' was deleted before the batch was validated",
                    "input_file_id",
                    None,
                )
            ]
        else:
            parsed, problems = await asyncio.to_thread(
                parse_batch_file, content, record["endpoint"], self.settings.max_lines
            )
        await asyncio.to_thread(self.steps.validated, batch_id, self.owner, parsed, problems)
        self.new_work.set()  # its chunks

    async def _chunk(self) -> bool:
        """One chunk claimed, its lines answered, and its results stored (unless its lease was lost)."""
        chunk = await asyncio.to_thread(self.chunks.claim_chunk, self.owner)
        if chunk is None:
            return False
        renewing = asyncio.create_task(self._renew(chunk))
        tenant = TENANT.set(self.keys.named(chunk.tenant))  # its lines: its models, its share
        try:
            outputs = await asyncio.gather(*(self._line(chunk.endpoint, line) for line in chunk.lines))
        finally:
            TENANT.reset(tenant)
            renewing.cancel()
        if await asyncio.to_thread(self.chunks.store_chunk, chunk, self.owner, outputs):
            self.new_work.set()  # perhaps the batch's last: to finalize
            succeeded = sum(ok for _, ok, _ in outputs)
            LINES.labels(endpoint=chunk.endpoint, outcome="succeeded").inc(succeeded)
            LINES.labels(endpoint=chunk.endpoint, outcome="failed").inc(len(outputs) - succeeded)
        else:
            logger.warning(
                "chunk %s:%d was not stored: another worker took it over, or its batch ended",
                chunk.batch_id,
                chunk.first_line,
            )
        return True

    async def _renew(self, chunk: Chunk) -> None:
        """The chunk's lease kept while its lines run."""
        while True:
            await asyncio.sleep(self.settings.lease_s / 3)
            if not await asyncio.to_thread(self.chunks.renew, chunk, self.owner):
                return

    async def _line(self, endpoint: str, line: BatchLine) -> tuple[int, bool, str]:
        async with self._lines:
            answer = await self._answer(endpoint, line.body)
        return line.number, answer.succeeded, output_line(line.custom_id, answer)

    async def _answer(self, endpoint: str, body: str) -> LineAnswer:
        """The line's answer; an overloaded or restarting model service is waited for, not reported."""
        answer = await answer_line(self.engine, endpoint, body)
        for wait_s in RETRY_WAITS_S:
            if not answer.retryable:
                break
            await asyncio.sleep(wait_s)
            answer = await answer_line(self.engine, endpoint, body)
        return answer

    async def _housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._last_housekeeping < HOUSEKEEPING_EVERY_S:
            return
        self._last_housekeeping = now
        deleted = await asyncio.to_thread(self.steps.expire_files)
        if deleted:
            logger.info("deleted %d expired file(s)", deleted)
        counts: dict[str, Any] = await asyncio.to_thread(self.steps.counts)
        for status in STATUSES:
            BATCHES.labels(status=status).set(counts.get(status, 0))
