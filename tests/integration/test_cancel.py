"""A person's cancel that Postgres aborts to break a deadlock is tried again, not reported as an
error: the abort undid all of it, and the other transaction has gone on."""

from __future__ import annotations

import threading

import psycopg
import pytest

from engine_adapter.model.identity import Actor
from engine_adapter.runs import commands
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

RECIPE = 'slug: cancel-me\nsteps:\n  - {id: s1, run_command: "true"}\n'


def waits_for_a_lock(conn: psycopg.Connection, pid: int) -> bool:
    row = conn.execute(
        "select exists (select 1 from pg_locks where pid = %s and not granted) as waits", (pid,)
    ).fetchone()
    return row["waits"]


def test_a_cancel_aborted_by_a_deadlock_is_tried_again(conn, db_url, apply):
    apply(RECIPE)
    run_id = spawn(conn, "cancel-me").run_id
    canceller = db.connect(db_url)
    pid = canceller.execute("select pg_backend_pid() as pid").fetchone()["pid"]
    failure: list[BaseException] = []

    def cancel() -> None:
        try:
            commands.cancel_run(canceller, run_id, Actor("tester", "cli"), "deadlock test")
        except BaseException as exc:  # reported by the assertion below
            failure.append(exc)

    with db.connect(db_url, autocommit=False) as other:
        # The other side holds the engine's row of the run; the cancel locks the run's thread row,
        # then waits for the engine's; the other side then asks for the thread row: a deadlock.
        other.execute("select 1 from absurd.t_threadline where task_id = %s for update", (run_id,))
        worker = threading.Thread(target=cancel)
        worker.start()
        harness.wait_for(lambda: waits_for_a_lock(conn, pid), 10, what="the cancel to wait")
        other.execute(
            "select 1 from threadline.run_threads where run_id = %s for update", (run_id,)
        )
        other.commit()
    worker.join(30)
    canceller.close()
    assert not worker.is_alive()
    assert failure == []
    run = conn.execute(
        "select state from threadline.run_threads where run_id = %s", (run_id,)
    ).fetchone()
    assert run["state"] == "cancelled"
    decisions = conn.execute(
        "select count(*) as n from threadline.thread_entries"
        " where run_id = %s and kind = 'decision' and data ->> 'decision' = 'cancel'",
        (run_id,),
    ).fetchone()
    assert decisions["n"] == 1


def test_inside_a_callers_transaction_a_deadlock_is_the_callers(conn, db_url):
    calls = 0

    def deadlocked() -> None:
        nonlocal calls
        calls += 1
        raise psycopg.errors.DeadlockDetected("deadlock detected")

    with conn.transaction(), pytest.raises(psycopg.errors.DeadlockDetected):
        db.retrying_deadlocks(conn, deadlocked)
    assert calls == 1
    calls = 0
    with pytest.raises(psycopg.errors.DeadlockDetected):
        db.retrying_deadlocks(conn, deadlocked)
    assert calls == db.DEADLOCK_TRIES
