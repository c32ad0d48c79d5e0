"""Limits per step: `limits: {memory, pids, cpu, tmp, output}` in a recipe (for all its steps) or
on a run_command / dispatch_task step (over the recipe's, key by key).

- memory: bytes the step's processes may hold ("512MiB"; K, M, G, T and KiB ... TiB are 1024-based)
- pids: how many processes and threads it may run at once
- cpu: CPU time it may use ("10m"), all its processes together
- tmp: bytes its /tmp and its run's own directory may hold together (both on disk)
- output: bytes of its output that are kept (the rest is dropped, and the step says so)

Pure values here: validation (for recipes.py), the canonical form a recipe stores, what the
conductor sends a bot, and the bot's defaults and ceilings (THREADLINE_STEP_LIMITS and
THREADLINE_STEP_LIMITS_MAX, "memory=2GiB,pids=512"). How a bot enforces them: step_guard.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine_adapter.model.errors import Invalid
from engine_adapter.model.recipe_values import format_duration, parse_duration
from engine_adapter.model.recipe_values import quote as _q

KEYS = ("memory", "pids", "cpu", "tmp", "output")
SIZE_KEYS = ("memory", "tmp", "output")
DEFAULTS_ENV = "THREADLINE_STEP_LIMITS"  # the bots process's defaults, e.g. "memory=2GiB,pids=512"
CEILINGS_ENV = "THREADLINE_STEP_LIMITS_MAX"  # the most a recipe may ask for

KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
# The widest a recipe may write at all; a bots process's ceilings are usually far lower.
BOUNDS: dict[str, tuple[float, float]] = {
    "memory": (16 * MIB, 16 * TIB),
    "pids": (4, 1 << 20),
    "cpu": (1.0, 366 * 86_400.0),
    "tmp": (1 * MIB, 1 << 60),
    "output": (1 * KIB, 64 * MIB),
}
DEFAULTS: dict[str, float | None] = {
    "memory": 1 * GIB,
    "pids": 256,
    "cpu": None,  # a step's timeout bounds it
    "tmp": 1 * GIB,
    "output": 64 * KIB,
}
CEILINGS: dict[str, float | None] = {
    "memory": 16 * GIB,
    "pids": 4096,
    "cpu": None,
    "tmp": 64 * GIB,
    "output": 8 * MIB,
}
_SIZE = re.compile(r"(\d{1,15})\s*(|B|K|KiB|M|MiB|G|GiB|T|TiB)")
_FACTOR = {"": 1, "B": 1, "K": KIB, "M": MIB, "G": GIB, "T": TIB}


class LimitError(Invalid):
    """A limit's value cannot be used; the message names the key and the value."""


def parse_size(value: Any) -> int:
    """512, "512MiB", "512M", "1GiB" -> bytes (K, M, G, T are 1024-based, like KiB ... TiB)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise LimitError(
            f"{_q(value)} is not a size: a number of bytes, or a number with K, M, G or T "
            "(or KiB, MiB, GiB, TiB; all 1024-based), e.g. 512MiB"
        )
    return int(match[1]) * _FACTOR[match[2][:1]]


def format_size(size: float, space: str = "") -> str:
    """Bytes in the largest unit that holds them exactly: 536870912 -> "512MiB"."""
    size = int(size)
    for unit, factor in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size and size % factor == 0:
            return f"{size // factor}{space}{unit}"
    return str(size) if not space else f"{size} bytes"


def parse_value(key: str, value: Any) -> float:
    """One limit's value in its unit (bytes, processes, seconds), checked against BOUNDS."""
    if key in SIZE_KEYS:
        number: float = parse_size(value)
    elif key == "pids":
        if not isinstance(value, int) or isinstance(value, bool):
            raise LimitError(f"{_q(value)} must be a whole number of processes")
        number = value
    else:
        try:
            number = parse_duration(value)
        except ValueError as err:
            raise LimitError(str(err)) from None
    low, high = BOUNDS[key]
    if not low <= number <= high:
        raise LimitError(f"{_q(value)} must be from {show(key, low)} to {show(key, high)}")
    return number


def show(key: str, value: float) -> str:
    """A limit's value for people: "512 MiB", "256 processes", "10m"."""
    if key in SIZE_KEYS:
        return format_size(value, " ")
    if key == "pids":
        return f"{int(value)} processes"
    return format_duration(value)


def canonical(key: str, value: float) -> str | int:
    """A limit's value as a recipe's canonical form stores it (parse_value reads it back)."""
    if key in SIZE_KEYS:
        return format_size(value)
    if key == "pids":
        return int(value)
    return format_duration(value)


def check_limits(raw: Any, path: str, errors: list[str]) -> dict[str, str | int] | None:
    """A recipe's or a step's `limits:` in canonical form (None when absent); each problem is
    appended to errors with its path."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not raw:
        errors.append(f"{path}: {_q(raw)} must map some of {', '.join(KEYS)} to values")
        return None
    out: dict[str, str | int] = {}
    for key, value in raw.items():
        if key not in KEYS:
            errors.append(f"{path}.{key}: unknown limit (known: {', '.join(KEYS)})")
            continue
        try:
            out[key] = canonical(key, parse_value(key, value))
        except LimitError as err:
            errors.append(f"{path}.{key}: {err}")
    return out


def merged(*layers: Mapping[str, Any] | None) -> dict[str, float]:
    """What the conductor sends a bot: the recipe's limits, then the step's over them, in their
    units. The canonical values were checked when the recipe was applied."""
    out: dict[str, float] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            out[key] = parse_value(key, value)
    return out


@dataclass(frozen=True)
class Limits:
    """One step's limits, in bytes, processes and seconds; None: not limited."""

    memory: int | None
    pids: int | None
    cpu: float | None
    tmp: int | None
    output: int

    def named(self, key: str) -> str:
        """How a failed step names the limit it reached: "memory limit 512 MiB"."""
        return f"{key} limit {show(key, getattr(self, key))}"

    def describe(self) -> str:
        return ", ".join(
            f"{key} {show(key, value)}" for key in KEYS if (value := getattr(self, key)) is not None
        )


def _from_env(name: str, base: Mapping[str, float | None]) -> dict[str, float | None]:
    out = dict(base)
    for part in (os.environ.get(name) or "").split(","):
        if not part.strip():
            continue
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in KEYS or not value.strip():
            raise LimitError(f"{name}: {part.strip()!r} must be KEY=VALUE, KEY one of {KEYS}")
        try:
            out[key] = None if value.strip() == "none" else parse_value(key, _number(value))
        except LimitError as err:
            raise LimitError(f"{name}: {key}: {err}") from None
    return out


def _number(text: str) -> Any:
    text = text.strip()
    return int(text) if text.isdigit() else text


def defaults() -> dict[str, float | None]:
    """This bots process's defaults: DEFAULTS, changed by THREADLINE_STEP_LIMITS."""
    return _from_env(DEFAULTS_ENV, DEFAULTS)


def ceilings() -> dict[str, float | None]:
    """The most a recipe may ask of this bots process: CEILINGS, changed by
    THREADLINE_STEP_LIMITS_MAX ("none": no ceiling)."""
    return _from_env(CEILINGS_ENV, CEILINGS)


def for_step(asked: Mapping[str, float]) -> Limits:
    """A step's limits: what its recipe asked over this bots process's defaults; LimitError when
    it asks for more than a ceiling (the step does not run)."""
    values = defaults()
    tops = ceilings()
    for key, value in asked.items():
        top = tops.get(key)
        if top is not None and value > top:
            raise LimitError(
                f"limits.{key} {show(key, value)} is above this bots host's ceiling, "
                f"{show(key, top)} ({CEILINGS_ENV})"
            )
        values[key] = value
    for key, default in values.items():  # defaults above a ceiling are held to it
        top = tops.get(key)
        if top is not None and (default is None or default > top):
            values[key] = top
    return Limits(
        memory=_int(values["memory"]),
        pids=_int(values["pids"]),
        cpu=values["cpu"],
        tmp=_int(values["tmp"]),
        output=int(values["output"] or DEFAULTS["output"] or 0),
    )


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
