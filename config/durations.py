"""Durations as people write them (`keep_alive: 5m`), read as seconds."""

from __future__ import annotations

import math
import re
from typing import Any

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")
FOREVER = ("forever", "never", "inf")


def seconds_or_forever(value: Any) -> float | None:
    """Seconds from a number or a duration (`90`, `30s`, `5m`, `1h`); None for forever (unset, `forever`, or a
    negative number, as Ollama's `keep_alive: -1`). ValueError names what it cannot read."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", *FOREVER)):
        return None
    if isinstance(value, bool):
        raise ValueError(f"a duration is seconds or text such as '5m', not {value!r}")
    if isinstance(value, int | float):
        return None if value < 0 or math.isinf(value) else float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text.startswith("-"):
            return None
        match = DURATION.fullmatch(text)
        if match:
            return float(match[1]) * UNITS[match[2] or "s"]
    raise ValueError(f"a duration is seconds or text such as '30s', '5m', '1h' or 'forever', not {value!r}")


def duration_text(seconds: float | None) -> str:
    """A duration as the log writes it: `30 s`, or `forever` (None)."""
    return "forever" if seconds is None else f"{seconds:g} s"
