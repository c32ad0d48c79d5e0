"""Connections, and the named queries each part keeps in its queries.sql."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from engine_adapter.model.settings import database_url
from engine_adapter.model.vocab import RunState
from engine_adapter.store.waking import WakingConnection

# A notification wakes only the processes that act on it. Conductors listen on NOTIFY_CHANNEL
# (runs the engine may now hand out: a spawn, a step done, an admission, a retry, a cancel; the
# database's own functions notify there too), bot processes on BOTS_CHANNEL (an instruction to
# claim). A bot's own chatter (its claim, streamed output) wakes nobody: consoles follow the
# change feed (migration 004), and waking a conductor or bot for it only ran a claim that found
# nothing. Nor does a run's end: the change feed tells consoles and widgets, and what an end
# releases (a parent's step, a queued run's admission) has wake-ups of its own from the database;
# each notification costs a commit in every listening backend of the database (docs/speed.md).
NOTIFY_CHANNEL = "threadline"
BOTS_CHANNEL = "threadline_bots"
BOT_WAKES = frozenset({"instruction"})
STEP_DONE = "step.done"  # said by threadline.emit_step_done (migration 013)
QUIET = frozenset({"claim", "progress", RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED})
DEADLOCK_TRIES = 4
_BLOCK = re.compile(r"^-- (\w+) --\n", re.MULTILINE)


@cache
def queries() -> dict[str, str]:
    """Named SQL blocks: `-- name --`, a comment line, then the query. Each part keeps its own
    beside its code (`engine_adapter/<part>/queries.sql`; the store's engine_queries.sql holds the
    only reads of Absurd's tables); names are unique across them."""
    found: dict[str, str] = {}
    for file in query_files():
        parts = _BLOCK.split(file.read_text())
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"query {name!r} is defined twice (again in {file.name})")
            found[name] = body.strip()
    return found


def query_files() -> list[Traversable]:
    """Every part's files of named queries, in a fixed order."""
    package = resources.files("engine_adapter")
    return [
        file
        for part in sorted(package.iterdir(), key=lambda p: p.name)
        if part.is_dir()
        for file in sorted(part.iterdir(), key=lambda f: f.name)
        if file.name.endswith("queries.sql")
    ]


def q(name: str) -> str:
    return queries()[name]


def connect(
    url: str | None = None, *, role: str | None = None, autocommit: bool = True
) -> psycopg.Connection[Any]:
    """A connection returning dict rows; autocommit so callers open transactions explicitly.
    Without a url: the login of process role `role` (see settings.database_url). Its wake-ups go
    out after its transactions commit (waking.py)."""
    return WakingConnection.open(url or database_url(role), autocommit, row_factory=dict_row)


def fetch_one(
    conn: psycopg.Connection[Any], name: str, params: Any = None
) -> dict[str, Any] | None:
    return conn.execute(q(name), params).fetchone()


def fetch_row(conn: psycopg.Connection[Any], name: str, params: Any = None) -> dict[str, Any]:
    """The row of a query that always returns one (an aggregate, a function call, a RETURNING
    of a write that always writes); none back is a bug, said by name."""
    row = fetch_one(conn, name, params)
    if row is None:
        raise RuntimeError(f"query {name!r} returned no row")
    return row


def fetch_all(conn: psycopg.Connection[Any], name: str, params: Any = None) -> list[dict[str, Any]]:
    return conn.execute(q(name), params).fetchall()


@contextmanager
def transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A transaction of its own, or the caller's when one is open: no savepoint (a failure
    rolls the caller's transaction back too), so no extra round trips."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        yield
        return
    with conn.transaction():
        yield


T = TypeVar("T")


def retrying_deadlocks(conn: psycopg.Connection[Any], work: Callable[[], T]) -> T:
    """Run `work` (a transaction of its own on `conn`) again when Postgres aborted it to break a
    deadlock: the abort undid all of it and the other transaction has gone on, so trying again
    is what the caller asked for. Inside a caller's transaction the abort is the caller's to
    handle: no retry there."""
    outer = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    for attempt in range(1, DEADLOCK_TRIES):
        try:
            return work()
        except psycopg.errors.DeadlockDetected:
            if outer:
                raise
            time.sleep(random.uniform(0.01, 0.05) * attempt)  # apart from the other side's retry
    return work()


def wake_target(run_id: str | None, what: str) -> tuple[str | None, str]:
    """(channel, payload) of the wake-up `what` means: who acts on it (no channel: nobody)."""
    if what in QUIET:
        return None, ""
    return BOTS_CHANNEL if what in BOT_WAKES else NOTIFY_CHANNEL, f"{what}:{run_id or ''}"


def parse_wake(payload: str) -> tuple[str, str]:
    """(what, run id) of a wake-up's payload, as wake_target and the SQL functions write it."""
    what, _, run_id = payload.partition(":")
    return what, run_id


def notify(conn: psycopg.Connection[Any], run_id: str | None, what: str) -> None:
    """Wake the conductors or the bots `what` concerns; delivered only when the caller's
    transaction commits."""
    channel, payload = wake_target(run_id, what)
    if channel is not None:
        conn.execute("select threadline.wake(%s, %s)", (channel, payload))
