"""The order in which requests waiting for one model service leave: by class and level first
(gateway/priority.py), then across tenants by weighted fair share of tokens, then by arrival.

Start-time fair queueing: each tenant's requests wait in arrival order. A tenant's next request is tagged with a
start time, the later of the queue's virtual time and the tenant's last finish, and finishes its tokens divided
by the tenant's weight later. The smallest start leaves first, and the virtual time becomes its start. A tenant
that floods gets its share, a tenant that sends a request now and then finds it at the head, and with one tenant
the order is arrival: nothing changes for a server without keys.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol


class Queued(Protocol):
    """What the queue needs of a waiting request."""

    @property
    def lane(self) -> tuple[int, int]: ...  # (class, level): a lower lane leaves first

    @property
    def tenant(self) -> str: ...

    @property
    def weight(self) -> float: ...

    @property
    def cost(self) -> int: ...  # its tokens

    @property
    def arrival(self) -> int: ...


@dataclass
class Lane:
    virtual_time: float = 0.0
    finish: dict[str, float] = field(default_factory=dict)  # each tenant's last finish tag
    waiting: dict[str, deque] = field(default_factory=dict)  # each tenant's requests, in arrival order

    def start(self, tenant: str) -> float:
        return max(self.virtual_time, self.finish.get(tenant, 0.0))


class FairQueue:
    def __init__(self) -> None:
        self._lanes: dict[tuple[int, int], Lane] = {}
        self._size = 0

    def push(self, item: Queued) -> None:
        lane = self._lanes.setdefault(item.lane, Lane())
        lane.waiting.setdefault(item.tenant, deque()).append(item)
        self._size += 1

    def head(self) -> Queued | None:
        """The next to leave, or None."""
        found = self._next()
        return found and found[1].waiting[found[2]][0]

    def pop(self, charge: bool = True) -> Queued:
        """The head, out of the queue; its tokens counted against its tenant's share unless `charge` is false (a
        request abandoned before it left costs nothing)."""
        found = self._next()
        assert found is not None, "pop from an empty queue"
        lane_key, lane, tenant = found
        queue = lane.waiting[tenant]
        item = queue.popleft()
        if charge:
            start = lane.start(tenant)
            lane.finish[tenant] = start + max(item.cost, 1) / item.weight
            lane.virtual_time = start
        if not queue:
            del lane.waiting[tenant]
        if not lane.waiting:  # an idle lane starts afresh: its tags meant something only while it was busy
            del self._lanes[lane_key]
        self._size -= 1
        return item

    def _next(self) -> tuple[tuple[int, int], Lane, str] | None:
        if not self._lanes:
            return None
        lane_key = min(self._lanes)
        lane = self._lanes[lane_key]
        tenant = min(lane.waiting, key=lambda name: (lane.start(name), lane.waiting[name][0].arrival))
        return lane_key, lane, tenant

    def __iter__(self) -> Iterator[Queued]:
        for lane in self._lanes.values():
            for queue in lane.waiting.values():
                yield from queue

    def __len__(self) -> int:
        return self._size
