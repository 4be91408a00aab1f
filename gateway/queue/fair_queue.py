"""The order in which requests waiting for one model service leave: by class first (gateway/queue/priority.py), then
across tenants by weighted fair share of tokens; within a tenant, by level (its `priority`), then arrival.

Start-time fair queueing: a tenant's next request is tagged with a start time, the later of the queue's virtual
time and the tenant's last finish, and finishes its tokens divided by the tenant's weight later. The smallest
start leaves first, and the virtual time becomes its start. A tenant that floods gets its share, a tenant that
sends a request now and then finds it at the head, and with one tenant the order is level, then arrival: nothing
changes for a server without keys. A request's `priority` orders its own tenant's requests, never another's: a
tenant cannot buy its way past the others' shares with it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


class Queued(Protocol):
    """What the queue needs of a waiting request."""

    @property
    def job_class(self) -> int: ...  # a lower class leaves first

    @property
    def level(self) -> int: ...  # within its tenant's requests, a lower level leaves first

    @property
    def tenant(self) -> str: ...

    @property
    def weight(self) -> float: ...

    @property
    def cost(self) -> int: ...  # its tokens

    @property
    def arrival(self) -> int: ...


Q = TypeVar("Q", bound=Queued)  # the queue gives back the requests it was given, of their own type


@dataclass
class ClassQueue(Generic[Q]):
    """The waiting requests of one class, per tenant: a heap by (level, arrival)."""

    virtual_time: float = 0.0
    finish: dict[str, float] = field(default_factory=dict)  # each tenant's last finish tag
    waiting: dict[str, list[tuple[int, int, Q]]] = field(default_factory=dict)

    def start(self, tenant: str) -> float:
        return max(self.virtual_time, self.finish.get(tenant, 0.0))

    def next_tenant(self) -> str:
        return min(self.waiting, key=lambda name: (self.start(name), self.waiting[name][0][1]))


class FairQueue(Generic[Q]):
    def __init__(self) -> None:
        self._classes: dict[int, ClassQueue[Q]] = {}
        self._size = 0

    def push(self, item: Q) -> None:
        queue = self._classes.setdefault(item.job_class, ClassQueue())
        heapq.heappush(queue.waiting.setdefault(item.tenant, []), (item.level, item.arrival, item))
        self._size += 1

    def classes(self) -> list[int]:
        """The classes with work waiting, first to leave first."""
        return sorted(self._classes)

    def head(self, job_class: int | None = None) -> Q | None:
        """The next of `job_class` to leave (of the first class waiting if None), or None."""
        if job_class is None:
            job_class = min(self._classes, default=-1)
        queue = self._classes.get(job_class)
        return None if queue is None else queue.waiting[queue.next_tenant()][0][2]

    def pop(self, job_class: int | None = None, charged: int | None = None) -> Q:
        """The head (of `job_class`), out of the queue; `charged` tokens (all of the item's if None) counted
        against its tenant's share: 0 for a request abandoned before it left, a piece's for a request that leaves
        in pieces (it is pushed back with the rest)."""
        job_class = min(self._classes) if job_class is None else job_class
        queue = self._classes[job_class]
        tenant = queue.next_tenant()
        item = heapq.heappop(queue.waiting[tenant])[2]
        cost = item.cost if charged is None else charged
        if cost:
            start = queue.start(tenant)
            queue.finish[tenant] = start + max(cost, 1) / item.weight
            queue.virtual_time = start
        if not queue.waiting[tenant]:
            del queue.waiting[tenant]
        if not queue.waiting:  # an idle class starts afresh: its tags meant something only while it was busy
            del self._classes[job_class]
        self._size -= 1
        return item

    def __iter__(self) -> Iterator[Q]:
        for queue in self._classes.values():
            for waiting in queue.waiting.values():
                yield from (item for _, _, item in waiting)

    def __len__(self) -> int:
        return self._size
