"""A process is alive while it holds its advisory lock (migration 029 asks the lock manager about
that one lock instead of reading pg_locks). Asking must tell the living from the dead, leave no
lock behind either way, and keep a live attempt's step key from being claimed twice."""

from __future__ import annotations

from datetime import timedelta

import psycopg

from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.store.workers import LOCK_CLASS, Worker
from engine_adapter.testing import harness

RECIPE = 'slug: liveness\nsteps:\n  - {id: s1, run_command: "true"}\n'


def alive(conn: psycopg.Connection, worker: Worker) -> bool:
    row = conn.execute("select threadline.worker_alive(%s) as alive", (worker.lock_key,)).fetchone()
    return row["alive"]


def listed(conn: psycopg.Connection, worker: Worker) -> bool:
    row = conn.execute(
        "select exists (select 1 from threadline.live_workers where id = %s) as live", (worker.id,)
    ).fetchone()
    return row["live"]


def advisory_locks_of(conn: psycopg.Connection) -> int:
    row = conn.execute(
        "select count(*) as n from pg_locks where locktype = 'advisory' and pid = pg_backend_pid()"
    ).fetchone()
    return row["n"]


def test_a_live_process_is_alive_and_a_closed_one_dead_leaving_no_lock(conn, db_url):
    worker = Worker("bots", db_url)
    try:
        assert alive(conn, worker) and listed(conn, worker)
        assert advisory_locks_of(conn) == 0
    finally:
        worker.close()
    # The server lets the lock go as it ends the closed connection's backend, a moment later.
    harness.wait_for(lambda: not alive(conn, worker), 10, what="the closed process to be dead")
    assert not listed(conn, worker)
    # The dead one's lock was taken for the question and given back: nothing held here, and a
    # new holder gets it at once.
    assert advisory_locks_of(conn) == 0
    with db.connect(db_url) as other:
        got = other.execute(
            "select pg_try_advisory_lock(%s, %s) as got", (LOCK_CLASS, worker.lock_key)
        ).fetchone()
        assert got["got"]
    assert conn.execute("select threadline.worker_alive(null) as a").fetchone()["a"] is False


def test_a_live_attempt_keeps_its_step_key_until_its_process_dies_or_is_pruned(conn, db_url, apply):
    apply(RECIPE)
    run_id = spawn(conn, "liveness").run_id
    worker = Worker("bots", db_url)
    key = f"{run_id}:s1"

    def free() -> bool:
        row = conn.execute("select threadline.step_key_free(%s) as free", (key,)).fetchone()
        return row["free"]

    assert free()
    conn.execute(
        "insert into threadline.step_claims (step_key, attempt, run_id, worker_id, host,"
        " lease_until) values (%s, 1, %s, %s, 'here', now() + %s)",
        (key, run_id, worker.id, timedelta(minutes=5)),
    )
    try:
        assert not free()  # its process lives and its lease runs
    finally:
        worker.close()
    # The process is gone (its backend ends a moment after the close): the attempt is lost, and
    # the key may be claimed again.
    harness.wait_for(free, 10, what="the dead process's step key to be free")
    conn.execute("delete from threadline.workers where id = %s", (worker.id,))
    assert free()  # and so when the dead process's row was pruned
    conn.execute(
        "update threadline.step_claims set outcome = 'completed', finished_at = now()"
        " where step_key = %s",
        (key,),
    )
    assert not free()  # a completed step key is never claimed again
