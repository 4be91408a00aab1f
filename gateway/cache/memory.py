"""The memory tier: one gateway worker's stored values, least recently used out first, within a byte budget that
counts what each entry really costs the process (the value, its key and the entry's own bookkeeping)."""

from __future__ import annotations

import sys
from collections import OrderedDict

# What an entry costs besides `getsizeof` of its key and value: the hash table's slot and index and the order
# list's node, which eviction churn keeps at about 128 bytes (tracemalloc over a million puts, bench/cache.py
# --memory-only, a one-off since removed: `git show 6a7ba5e:bench/cache.py`), and the allocators' rounding of the
# key and value (about 30 more, by RSS after malloc_trim).
ENTRY_OVERHEAD_BYTES = 160


def entry_bytes(key: bytes, value: bytes) -> int:
    return sys.getsizeof(key) + sys.getsizeof(value) + ENTRY_OVERHEAD_BYTES


class MemoryTier:
    """Values by key, the least recently used dropped when `budget_bytes` would be passed."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.held_bytes = 0
        self._values: OrderedDict[bytes, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: bytes) -> bytes | None:
        value = self._values.get(key)
        if value is not None:
            self._values.move_to_end(key)
        return value

    def put(self, key: bytes, value: bytes) -> None:
        size = entry_bytes(key, value)
        if size > self.budget_bytes:
            return
        self.drop(key)
        while self.held_bytes + size > self.budget_bytes:
            old_key, old_value = self._values.popitem(last=False)
            self.held_bytes -= entry_bytes(old_key, old_value)
        self._values[key] = value
        self.held_bytes += size

    def drop(self, key: bytes) -> None:
        value = self._values.pop(key, None)
        if value is not None:
            self.held_bytes -= entry_bytes(key, value)
