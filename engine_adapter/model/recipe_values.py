"""What recipe validation shares with webhook triggers and events: the error that lists every
problem, quoting a value in a message, durations, and event names.

Pure Python; imports no other recipe module, so each of them can import it at the top.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from engine_adapter.model.errors import CONTRACT_INVALID, Invalid

# Every duration (a sleep, a step or gate timeout, how far ahead a sleep_until lies): a year and
# a day covers any real schedule, and keeps every deadline far inside what clocks can hold.
MAX_DURATION_S = 366 * 86_400.0
MAX_DURATION = "366 days"
RETENTION_KEYS = ("runs", "output")  # how long finished runs, and their streamed output, are kept
MIN_RETENTION_S = 3600.0
_MAX_DURATION_TEXT = 64
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

EVENT_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,200}")  # `on_event` and `threadline emit NAME`


class RecipeError(Invalid):
    """A recipe is invalid; `errors` holds every problem as "<path>: <problem>"."""

    http_status = 422  # the request was well formed; the recipe in it is not
    contract_exit, envelope_type = CONTRACT_INVALID, "invalid_workflow"

    def __init__(self, errors: list[str], source: str | None = None) -> None:
        self.errors = list(errors)
        self.source = source
        super().__init__("\n".join(self.errors))

    def __reduce__(self) -> tuple[Any, ...]:  # across processes (the console's bounded check)
        return (RecipeError, (self.errors, self.source))


def quote(value: Any) -> str:
    """Quote a value for an error message: strings in double quotes, others as JSON; cut short."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def parse_duration(text: str | float) -> float:
    """ "30s", "10m", "2h", "1d", "1h30m", "500ms" or bare seconds ("90", 90) -> seconds, whole
    milliseconds, at most MAX_DURATION_S; ValueError saying which rule the text breaks."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        # A huge int would not fit a float; NaN is no duration.
        seconds = -1.0 if math.isnan(text) else float(min(text, MAX_DURATION_S + 1))
    else:
        s = text.strip() if isinstance(text, str) else ""
        parts = _DURATION_PART.findall(s) if len(s) <= _MAX_DURATION_TEXT else []
        if re.fullmatch(r"\d{1,20}", s):
            seconds = float(s)
        elif not s or "".join(n + u for n, u in parts) != s:
            raise ValueError(f"{quote(text)} is not a duration")
        else:
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not 0 <= seconds:
        raise ValueError(f"{quote(text)} is not a duration")
    if seconds > MAX_DURATION_S:
        raise ValueError(
            f"{quote(text)} is longer than {MAX_DURATION}, the longest a duration may be"
        )
    return round(seconds * 1000) / 1000


def format_duration(seconds: float) -> str:
    """Canonical duration string, the inverse of parse_duration: 5400 -> "1h30m", 0.5 -> "500ms"."""
    ms = round(seconds * 1000)
    out = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            out.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(out) or "0s"


def retention_seconds(value: Any) -> float:
    """A retention (`runs` or `output`) in seconds; ValueError naming the rule it breaks."""
    seconds = parse_duration(value)
    if seconds < MIN_RETENTION_S:
        raise ValueError(f"{quote(value)} must be at least 1h")
    return seconds
