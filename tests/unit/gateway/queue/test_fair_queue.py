"""The fair queue (gateway/queue/fair_queue.py): class first, then start-time fair queueing across tenants by tokens
over weight; a tenant's own requests by level, then arrival; a request popped uncharged costs its tenant nothing."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

from gateway.queue.fair_queue import FairQueue

_arrivals = itertools.count()


@dataclass
class Item:
    tenant: str
    cost: int = 10
    weight: float = 1.0
    job_class: int = 0
    level: int = 0
    name: str = ""
    arrival: int = field(default_factory=lambda: next(_arrivals))


def queue_of(*items: Item) -> FairQueue:
    queue = FairQueue()
    for item in items:
        queue.push(item)
    return queue


def drain(queue: FairQueue) -> list[Item]:
    popped = []
    while len(queue):
        head = queue.head()
        popped.append(queue.pop())
        assert popped[-1] is head  # head() is what pop() takes
    assert queue.head() is None
    return popped


def names(items: list[Item]) -> list[str]:
    return [item.name for item in items]


def test_one_tenant_leaves_in_arrival_order_whatever_the_costs():
    items = [Item("a", cost=cost, name=str(n)) for n, cost in enumerate((500, 1, 30, 1, 10**6, 7))]
    assert names(drain(queue_of(*items))) == ["0", "1", "2", "3", "4", "5"]


def test_a_tenants_requests_leave_by_level_then_arrival():
    queue = queue_of(
        Item("a", level=0, name="0-first"),
        Item("a", level=3, name="3"),
        Item("a", level=-1, name="-1"),
        Item("a", level=0, name="0-second"),
        Item("a", level=-1, name="-1b"),
    )
    assert names(drain(queue)) == ["-1", "-1b", "0-first", "0-second", "3"]


def test_a_lower_class_leaves_first_whatever_the_shares():
    queue = queue_of(
        Item("a", job_class=1, name="batch"),
        Item("a", level=5, name="a-low"),
        Item("b", job_class=1, level=-3, name="batch-urgent"),
        Item("b", name="b-default"),
    )
    order = names(drain(queue))
    assert order[:2] in (["a-low", "b-default"], ["b-default", "a-low"]) and order[2:] == ["batch", "batch-urgent"]


def test_a_level_orders_its_own_tenants_requests_never_anothers():
    queue = queue_of(*(Item("a", name=f"a{n}") for n in range(4)), Item("b", name="b0"))
    assert names([queue.pop(), queue.pop()]) == ["a0", "b0"]
    queue.push(Item("b", name="b1"))
    queue.push(Item("a", level=-100, name="a-urgent"))  # ahead of a's own, not of b's share
    assert names(drain(queue)) == ["b1", "a-urgent", "a1", "a2", "a3"]


def test_a_flooding_tenant_alternates_with_another_of_equal_weight():
    flood = [Item("a", name=f"a{n}") for n in range(6)]
    queue = queue_of(*flood, Item("b", name="b0"), Item("b", name="b1"))
    assert names(drain(queue)) == ["a0", "b0", "a1", "b1", "a2", "a3", "a4", "a5"]


def test_a_request_arriving_behind_a_flood_leaves_next():
    queue = queue_of(*(Item("a", name=f"a{n}") for n in range(10)))
    assert names([queue.pop() for _ in range(4)]) == ["a0", "a1", "a2", "a3"]
    queue.push(Item("b", name="b0"))
    assert queue.head().name == "b0"
    assert names(drain(queue)) == ["b0", "a4", "a5", "a6", "a7", "a8", "a9"]


def test_shares_follow_weights():
    queue = queue_of(
        *(Item("heavy", weight=3.0, name="h") for _ in range(300)),
        *(Item("light", weight=1.0, name="l") for _ in range(300)),
    )
    first = Counter(names(queue.pop() for _ in range(200)))
    assert abs(first["h"] - 150) <= 2 and abs(first["l"] - 50) <= 2


def test_shares_are_of_tokens_not_requests():
    queue = queue_of(
        *(Item("big", cost=100, name="big") for _ in range(50)),
        *(Item("small", cost=10, name="small") for _ in range(500)),
    )
    popped = [queue.pop() for _ in range(220)]
    tokens = Counter()
    for item in popped:
        tokens[item.tenant] += item.cost
    assert abs(tokens["big"] - tokens["small"]) <= 100  # one large request apart at most


def test_three_tenants_share_equally():
    queue = queue_of(*(Item(tenant, name=tenant) for tenant in "abc" for _ in range(30)))
    for start in range(0, 60, 3):  # each round of three holds one of each
        assert sorted(names(queue.pop() for _ in range(3))) == ["a", "b", "c"], start


def test_an_idle_tenant_banks_no_credit_while_others_run():
    queue = queue_of(Item("b", name="b-early"), *(Item("a", name=f"a{n}") for n in range(20)))
    assert names([queue.pop() for _ in range(12)])[:2] == ["b-early", "a0"]  # b then sat idle
    for n in range(3):
        queue.push(Item("b", name=f"b{n}"))
    order = names(drain(queue))
    assert order[:6] == ["b0", "a11", "b1", "a12", "b2", "a13"]  # its share from now on, no burst


def test_a_request_popped_uncharged_costs_its_tenant_nothing():
    charged = queue_of(Item("a", name="a0"), Item("a", name="a1"), Item("b", name="b0"))
    charged.pop()
    assert charged.head().name == "b0"
    uncharged = queue_of(Item("a", name="a0"), Item("a", name="a1"), Item("b", name="b0"))
    assert uncharged.pop(charged=0).name == "a0"  # its caller gave up before it left
    assert uncharged.head().name == "a1"  # a is still at the start: arrival decides


def test_a_queue_that_empties_starts_afresh():
    queue = queue_of(*(Item("a", cost=1000, name="a-old") for _ in range(5)))
    drain(queue)
    queue.push(Item("a", name="a-new"))
    queue.push(Item("b", name="b-new"))
    assert names(drain(queue)) == ["a-new", "b-new"]  # a's earlier tokens no longer count


def test_length_and_iteration():
    queue = FairQueue()
    assert len(queue) == 0 and queue.head() is None and list(queue) == []
    items = [Item("a", job_class=1), Item("b"), Item("a", level=2)]
    for item in items:
        queue.push(item)
    assert len(queue) == 3 and sorted(id(item) for item in queue) == sorted(id(item) for item in items)
    drain(queue)
    assert len(queue) == 0 and list(queue) == []
