"""Transactions a run no longer needs (docs/speed.md): the conductor looks up no checkpoint its
claim did not load (conductor/known_checkpoints.py), so a run of three steps, parked and woken
at each, calls absurd.get_task_checkpoint_state never, while the claims' bulk loads
(get_task_checkpoint_states) are seen; and a run's closing writes commit with its finish
checkpoint; and a step's updates of its run's row (armed by the SEND, disarmed by the done
event) stay on their page, touching no index (migration 051), so only the run's changes of state
(pending, running, completed) write index entries; and idle bot slots claim only when woken."""

from __future__ import annotations

import time

import psycopg

from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.parks import sent_and_parked

RECIPE = """
slug: three-true
steps:
  - {id: a, run_command: "true"}
  - {id: b, run_command: "true"}
  - {id: c, run_command: "true"}
"""


def function_calls(conn: psycopg.Connection) -> dict[str, int]:
    conn.execute("select pg_stat_clear_snapshot()")
    rows = conn.execute(
        "select funcname, calls from pg_stat_user_functions where schemaname = 'absurd'"
        " and funcname like 'get_task_checkpoint_state%%'"
    ).fetchall()
    return {r["funcname"]: r["calls"] for r in rows}


def test_a_run_looks_up_no_checkpoint_beyond_its_claim(db_url, conn, apply, procs):
    name = conn.execute("select current_database() as d").fetchone()["d"]
    conn.execute(f"alter database {name} set track_functions = 'pl'")  # new sessions count calls
    apply(RECIPE)
    # No hold: each step's run parks on its done event and is claimed again (a replay).
    procs.start("conductor", env={"THREADLINE_CONDUCTOR_HOLD_MS": "0"}, wait=True)
    procs.start("bots", wait=True)
    run_id = spawn(conn, "three-true").run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert [s["status"] for s in view["steps"]] == ["completed"] * 3
    procs.kill_all()  # their backends end and report their counts
    deadline = time.monotonic() + 15
    while (calls := function_calls(conn)).get("get_task_checkpoint_states", 0) < 4:
        assert time.monotonic() < deadline, f"the claims' loads were never counted: {calls}"
        time.sleep(0.2)
    assert calls.get("get_task_checkpoint_state", 0) == 0, calls


def test_a_runs_closing_writes_commit_with_its_finish_checkpoint(conn, apply, procs):
    apply(RECIPE)
    procs.start("conductor", wait=True)
    procs.start("bots", wait=True)
    run_id = spawn(conn, "three-true").run_id
    harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    row = conn.execute(
        "select (select xmin::text from threadline.thread_entries"
        "         where run_id = %(run)s and dedupe_key = 'completed') as note,"
        "       (select xmin::text from absurd.c_threadline"
        "         where task_id = %(run)s and checkpoint_name = 'finish') as checkpoint,"
        "       (select xmin::text from absurd.r_threadline"
        "         where task_id = %(run)s and state = 'completed') as completion",
        {"run": run_id},
    ).fetchone()
    # Absurd's completion of the run commits with them too.
    assert row["completion"] == row["checkpoint"], row
    # One transaction: the note, written in a savepoint of it, has a later xid than its parent,
    # which wrote the checkpoint; a note committed on its own before would have an earlier one.
    assert row["note"] is not None and int(row["note"]) > int(row["checkpoint"]), row


def run_thread_updates(conn: psycopg.Connection) -> tuple[int, int]:
    """(updates, of which HOT) of run_threads so far, as reported."""
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        "select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables"
        " where schemaname = 'threadline' and relname = 'run_threads'"
    ).fetchone()
    return int(row["n_tup_upd"]), int(row["n_tup_hot_upd"])


def test_a_steps_updates_of_its_run_write_no_index_entries(conn, apply, procs):
    apply(RECIPE)
    procs.start("conductor", env={"THREADLINE_CONDUCTOR_HOLD_MS": "0"}, wait=True)
    procs.start("bots", wait=True)
    run_id = spawn(conn, "three-true").run_id
    harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    procs.kill_all()  # their backends end and report their counts
    deadline = time.monotonic() + 15
    while (counts := run_thread_updates(conn))[0] < 15:
        assert time.monotonic() < deadline, f"the run's updates were never counted: {counts}"
        time.sleep(0.2)
    time.sleep(0.5)
    updates, hot = run_thread_updates(conn)
    # Three steps, each armed and disarmed: six updates that were never HOT before.
    assert updates - hot <= 3, (
        f"{updates - hot} of {updates} updates of the run wrote index entries"
    )


def claim_calls(conn: psycopg.Connection) -> int:
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        "select coalesce(sum(calls), 0) as n from pg_stat_user_functions"
        " where schemaname = 'threadline' and funcname = 'claim_step'"
    ).fetchone()
    return int(row["n"])


def test_idle_bot_slots_claim_only_when_woken(db_url, conn, procs):
    name = conn.execute("select current_database() as d").fetchone()["d"]
    conn.execute(f"alter database {name} set track_functions = 'pl'")
    procs.start("bots", args=["--concurrency", "4"], wait=True)
    time.sleep(4)
    procs.kill_all()  # its backends end and report their counts
    deadline = time.monotonic() + 15
    while (calls := claim_calls(conn)) < 4:
        assert time.monotonic() < deadline, f"the slots' first claims were never counted: {calls}"
        time.sleep(0.2)
    time.sleep(0.5)
    calls = claim_calls(conn)
    # Each slot's first claim, then about one a second, when the listener wakes a slot; not
    # every slot each second on its own as well (about 4 + 4 x 4 + 4).
    assert calls <= 12, f"{calls} claims by four idle slots in about four seconds"


SLOW = """
slug: one-slow
steps:
  - {id: a, run_command: "sleep 3"}
"""


def test_a_run_no_executor_holds_parks_in_its_send_transaction(conn, apply, procs):
    """The SEND (its instruction and checkpoint) and the park on the step's done event commit
    together: the event's row, which the park puts there, has the SEND checkpoint's xid."""
    apply(SLOW)
    procs.start("conductor", env={"THREADLINE_CONDUCTOR_HOLD_MS": "0"}, wait=True)
    procs.start("bots", wait=True)
    run_id = spawn(conn, "one-slow").run_id
    row = sent_and_parked(conn, str(run_id))
    assert row["send"] == row["park"], row
    assert row["state"] == "sleeping", row
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert [s["status"] for s in view["steps"]] == ["completed"]


def test_a_conductor_killed_after_a_parking_send_loses_no_attempt(conn, apply, procs):
    """Its SEND and park committed together, a conductor SIGKILLed right after them leaves the
    run parked, not claimed by a dead process: the bot's answer wakes it and the same attempt
    goes on (with the park a transaction of its own, that window cost an attempt)."""
    apply(RECIPE)
    procs.start("bots", wait=True)
    doomed = procs.start(
        "conductor",
        env={"THREADLINE_CONDUCTOR_HOLD_MS": "0", "THREADLINE_CRASH_AT": "after_send_checkpoint"},
        wait=True,
    )
    run_id = spawn(conn, "three-true").run_id
    assert doomed.wait(timeout=30) == -9
    procs.start("conductor", env={"THREADLINE_CONDUCTOR_HOLD_MS": "0"})
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert [s["status"] for s in view["steps"]] == ["completed"] * 3
    attempts = conn.execute(
        "select count(*) as n from absurd.r_threadline where task_id = %s", (run_id,)
    ).fetchone()["n"]
    assert attempts == 1


def test_a_spawn_with_no_transaction_open_is_its_one_statement(conn, apply, monkeypatch):
    """Threadline's own spawn on an autocommit connection opens no transaction block around its
    one statement (two round trips more); inside a caller's transaction it joins that one."""
    apply(RECIPE)

    def no_block(*args: object, **kwargs: object) -> None:
        raise AssertionError("a transaction block was opened for a lone spawn")

    monkeypatch.setattr(conn, "transaction", no_block)
    run_id = spawn(conn, "three-true").run_id
    monkeypatch.undo()
    assert (
        conn.execute(
            "select count(*) as n from threadline.run_threads where run_id = %s", (run_id,)
        ).fetchone()["n"]
        == 1
    )
    with conn.transaction(force_rollback=True):
        inside = spawn(conn, "three-true").run_id
    assert (
        conn.execute(
            "select count(*) as n from threadline.run_threads where run_id = %s", (inside,)
        ).fetchone()["n"]
        == 0
    )  # rolled back with the caller's transaction
