"""Run ids as people give them: the full id, or any unique prefix or tail of at least MIN_PREFIX
hex characters. Run ids are UUIDv7, whose leading characters are the time, so the short id the
console shows is the tail (names.short_run_id); a prefix names a run once it is long enough to
pass the minute. Every door that takes a run id (CLI, contract, HTTP API, notebook frames)
resolves it here, so each answers a short, ambiguous or malformed id alike: one line naming the
value, never a database error."""

from __future__ import annotations

import functools
import string
import uuid
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import psycopg

from engine_adapter.model.errors import Invalid
from engine_adapter.runs.thread_entries import RunNotFound
from engine_adapter.store import db

MIN_PREFIX = 8
FULL = 32  # hex digits in a uuid
SHOWN = 10  # candidates named in an ambiguity
LAYOUT = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"  # a uuid's text: where its dashes are
_HEX = frozenset(string.hexdigits.lower())

P = ParamSpec("P")
R = TypeVar("R")


class RunIdError(Invalid):
    """A run id that names no single run by its form: malformed, too short or ambiguous. Its
    reason says why without the value (for a page that shows the value already)."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"{text[:40]!r} is {reason}")
        self.reason = reason


def digits(text: str) -> str:
    """The hex digits of a run id or prefix (dashes dropped); RunIdError when it is not one."""
    raw = text.strip().lower()
    hexes = raw.replace("-", "")
    if not hexes or not set(hexes) <= _HEX or len(hexes) > FULL:
        raise RunIdError(
            text,
            f"not a run id: give the id, or at least {MIN_PREFIX} of its hex characters (its "
            "first or its last, as the console shows them)",
        )
    if len(hexes) < MIN_PREFIX:
        raise RunIdError(
            text,
            f"too short for a run id: give at least {MIN_PREFIX} of its hex characters (its "
            "first or its last)",
        )
    return hexes


def reversed_tail(hexes: str) -> str:
    """The last len(hexes) characters of an id ending with these digits, dashes where a uuid's
    text has them, reversed (as migration 038's index holds ids)."""
    out, digits = [], iter(reversed(hexes))
    left = len(hexes)
    for slot in reversed(LAYOUT):
        if not left:
            break
        if slot == "-":
            out.append("-")
        else:
            out.append(next(digits))
            left -= 1
    return "".join(out)


def resolve_run_id(conn: psycopg.Connection[Any], text: str) -> str:
    """The full id of the one run whose id is `text`, starts with it or ends with it. RunIdError
    when `text` is malformed or matches several runs (naming them); RunNotFound when it matches
    none."""
    hexes = digits(text)
    if len(hexes) == FULL:
        # A full id names its run; whether it exists is the caller's question (as before).
        return str(uuid.UUID(hexes))
    # A prefix is a range of the primary key: from the prefix padded with 0s to it padded with fs.
    low, high = (str(uuid.UUID(hexes.ljust(FULL, pad))) for pad in "0f")
    rows = db.fetch_all(
        conn,
        "run_ids_matching",
        dict(low=low, high=high, reversed_tail=reversed_tail(hexes), n=SHOWN + 1),
    )
    if not rows:
        raise RunNotFound(f"no run has an id starting or ending with {hexes}")
    if len(rows) > 1:
        names = ", ".join(str(r["run_id"]) for r in rows[:SHOWN])
        more = ", ..." if len(rows) > SHOWN else ""
        raise RunIdError(text, f"ambiguous: runs {names}{more} match it; give more characters")
    return str(rows[0]["run_id"])


def takes_run_id(
    fn: Callable[Concatenate[psycopg.Connection[Any], str, P], R],
) -> Callable[Concatenate[psycopg.Connection[Any], str, P], R]:
    """For helpers called as fn(conn, run_id, ...): the run id resolved first."""

    @functools.wraps(fn)
    def call(conn: psycopg.Connection[Any], run_id: str, *args: P.args, **kwargs: P.kwargs) -> R:
        return fn(conn, resolve_run_id(conn, str(run_id)), *args, **kwargs)

    return call
