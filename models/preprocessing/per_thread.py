"""One copy of an object per thread, for tokenizers and processors that are not safe to share."""

from __future__ import annotations

import copy
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class PerThread(Generic[T]):
    """A fast tokenizer keeps its truncation and padding settings in shared Rust state: a call that changes
    them while another thread encodes fails with 'Already borrowed'. Each thread gets its own deep copy."""

    def __init__(self, template: T) -> None:
        self.template = template
        self._local = threading.local()

    def get(self) -> T:
        value = getattr(self._local, "value", None)
        if value is None:
            value = self._local.value = copy.deepcopy(self.template)
        return value
