"""Which waiting work a model service runs first.

Three classes, in this order:
- `live`: an online request a user waits for: a query. Recognised without the client's help: a request of at most
  `LIVE_MAX_ROWS` inputs and `LIVE_MAX_TOKENS` tokens, or one with a `priority` below the default, or any request
  of a tenant marked `interactive` in the keys file.
- `indexing`: every other online request (documents, chunks, a corpus sent online).
- `batch`: the lines of bulk jobs (gateway/jobs/), which leave only when no online row waits.

On a model service with a live lane (a CPU), live work leaves at once for the service's live API, run beside the batch
in progress (gateway/queue/model_calls.py, runners/pool.py). Elsewhere it takes the next call ahead of indexing, and
while it keeps coming an indexing or batch call holds at most the model's pass time budget (`pass_budget_ms`), so a
query waits for one short call at most; indexing is never starved: it gets every other call while both wait
(gateway/queue/coalesce.py). Within a class, tenants share by `weight`
(gateway/queue/fair_queue.py), and among a tenant's requests a lower `level` goes first: the `priority` field of an
online request (vLLM's: an integer, lower first, default 0).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, Field, StrictInt

JobClass = Literal["live", "indexing", "batch"]
CLASS_ORDER: dict[JobClass, int] = {"live": 0, "indexing": 1, "batch": 2}
JOB_CLASSES: tuple[JobClass, ...] = tuple(CLASS_ORDER)
# A search query is one to a few short texts: 4 inputs of up to 64 tokens each.
LIVE_MAX_ROWS = 4
LIVE_MAX_TOKENS = 256


@dataclass(frozen=True)
class Priority:
    job_class: JobClass = "indexing"  # an online request's until `of_request` has seen its size
    level: int = 0
    tenant: str = ""  # whose work it is (the API key's tenant)
    weight: float = 1.0  # its share against other tenants' work of the same class
    interactive: bool = False  # the tenant is marked interactive in the keys file: all its requests are live

    @property
    def batch(self) -> bool:
        return self.job_class == "batch"

    @property
    def live(self) -> bool:
        return self.job_class == "live"

    def of_request(self, rows: int, tokens: int) -> Priority:
        """This online request's class, now that its size is known; a bulk-job line stays `batch`."""
        if self.batch:
            return self
        small = rows <= LIVE_MAX_ROWS and tokens <= LIVE_MAX_TOKENS
        return replace(self, job_class="live" if small or self.level < 0 or self.interactive else "indexing")


ONLINE = Priority()  # an online request before its size is known
BATCH = Priority("batch")
# The priority of the work being answered: set per request by `gateway.answering.answered`, per line by the job
# worker.
PRIORITY: ContextVar[Priority] = ContextVar("embento_priority", default=ONLINE)


class Prioritized(BaseModel):
    """The `priority` field every POST body takes."""

    priority: StrictInt = Field(
        0,
        description=(
            "vLLM's: among the API key's online requests, a lower value is run first (default 0); below 0, the "
            "request is also served as a live query (ahead of indexing work). Bulk jobs always wait for online work."
        ),
    )
