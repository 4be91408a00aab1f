"""Which waiting work a model service runs first.

Two classes: `interactive` (every online request) and `batch` (the lines of bulk jobs, gateway/jobs/). A batch
row leaves for a model service only when no interactive row waits, one pass at a time, so bulk work fills idle
capacity and an interactive request is never held behind more than one batch pass. Within a class, tenants share by
`weight` (gateway/queue/fair_queue.py), and among a tenant's requests a lower `level` goes first: the `priority`
field of an online request (vLLM's: an integer, lower first, default 0).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, StrictInt

JobClass = Literal["interactive", "batch"]
CLASS_ORDER: dict[JobClass, int] = {"interactive": 0, "batch": 1}


@dataclass(frozen=True)
class Priority:
    job_class: JobClass = "interactive"
    level: int = 0
    tenant: str = ""  # whose work it is (the API key's tenant)
    weight: float = 1.0  # its share against other tenants' work of the same class

    @property
    def batch(self) -> bool:
        return self.job_class == "batch"


INTERACTIVE = Priority()
BATCH = Priority("batch")
# The priority of the work being answered: set per request by `gateway.http.answer.answered`, per line by the job
# worker.
PRIORITY: ContextVar[Priority] = ContextVar("embento_priority", default=INTERACTIVE)


class Prioritized(BaseModel):
    """The `priority` field every POST body takes."""

    priority: StrictInt = Field(
        0,
        description=(
            "vLLM's: among the API key's interactive requests, a lower value is run first (default 0). Bulk jobs "
            "always wait for interactive work."
        ),
    )
