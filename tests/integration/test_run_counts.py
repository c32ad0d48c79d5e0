"""The run counts kept by day and workflow (migration 026) that the runs page reads: they must
equal counting the runs themselves, whatever writes them, however many writers at once, and after
the cleanup job folds them."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import psycopg

from bench.seed import seed_runs
from engine_adapter.read import run_list
from engine_adapter.read.run_list import RunFilters
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

TOP_LEVEL = "(parent_run_id is null or trigger ->> 'what' = 'sub-workflow')"


def counted(conn: psycopg.Connection, workflow: str | None = None) -> dict[str, int]:
    """Counting the runs themselves: the query the page made before counts were kept."""
    rows = db.fetch_all(conn, "run_state_counts", RunFilters(workflow=workflow).sql_params())
    found = {r["state"]: r["runs"] for r in rows}
    return {state: found.get(state, 0) for state in run_list.RUN_STATES}


def kept(conn: psycopg.Connection, workflow: str | None = None) -> dict[str, int]:
    filters = RunFilters(workflow=workflow)
    assert filters.counted_as_kept()
    return run_list.state_counts(conn, filters)


def failures_counted(conn: psycopg.Connection) -> dict[tuple[str, str], int]:
    rows = conn.execute(
        "select workflow, coalesce(current_step, '(before any step)') as step, count(*) as runs"
        f"  from threadline.run_threads where state = 'failed' and {TOP_LEVEL} group by 1, 2"
    ).fetchall()
    return {(r["workflow"], r["step"]): r["runs"] for r in rows}


def failures_kept(conn: psycopg.Connection) -> dict[tuple[str, str], int]:
    since = run_list.utc_day(db.fetch_one(conn, "db_now")["now"] - timedelta(days=400))
    rows = db.fetch_all(conn, "failures_by_step_kept", dict(since=since, workflow=None))
    return {(r["workflow"], r["step"]): r["runs"] for r in rows}


def assert_agree(conn: psycopg.Connection) -> None:
    assert kept(conn) == counted(conn)
    for workflow in ("seed-1", "seed-4"):
        assert kept(conn, workflow) == counted(conn, workflow)
    assert failures_kept(conn) == failures_counted(conn)


def test_kept_counts_follow_inserts_moves_branches_and_deletes(conn):
    seed_runs(conn, 3000, claims=0)
    assert kept(conn)["completed"] > 0  # the seeded runs were counted as they were written
    assert_agree(conn)
    with conn.transaction():
        # Moves: runs fail at a step, failed runs are retried, waiting runs finish, a failed run
        # is moved to another step (its failure counts at the new one).
        conn.execute(
            "update threadline.run_threads set state = 'failed', current_step = 'deploy'"
            " where run_id in (select run_id from threadline.run_threads"
            "                   where state = 'completed' order by run_id limit 200)"
        )
        conn.execute(
            "update threadline.run_threads set state = 'running'"
            " where run_id in (select run_id from threadline.run_threads"
            "                   where state = 'failed' and current_step = 'check' limit 50)"
        )
        conn.execute(
            "update threadline.run_threads set state = 'completed' where state = 'waiting'"
        )
        conn.execute(
            "update threadline.run_threads set current_step = 'notify'"
            " where run_id in (select run_id from threadline.run_threads"
            "                   where state = 'failed' and current_step = 'deploy' limit 20)"
        )
        # A parallel branch is in its parent: not counted; a sub-workflow is a run of its own.
        parent = conn.execute("select run_id from threadline.run_threads limit 1").fetchone()
        for what in ("branch", "sub-workflow"):
            conn.execute(
                "insert into threadline.run_threads (run_id, workflow, workflow_version,"
                " recipe_hash, recipe, payload, bot, trigger, state, parent_run_id)"
                " select gen_random_uuid(), workflow, workflow_version, recipe_hash, recipe,"
                " '{}', bot, jsonb_build_object('kind', 'event', 'what', %s::text), 'failed',"
                " run_id from threadline.run_threads where run_id = %s",
                (what, parent["run_id"]),
            )
    assert_agree(conn)
    doomed = [
        r["run_id"]
        for r in conn.execute(
            "select run_id from threadline.run_threads where parent_run_id is null"
            " order by created_at limit 300"
        )
    ]
    with conn.transaction():
        removed = db.fetch_one(conn, "delete_runs", dict(run_ids=doomed))["removed"]
    assert 0 < removed <= 300  # finished runs only: delete_runs never takes a live one
    assert_agree(conn)


def test_writers_at_once_keep_exact_counts(conn, db_url):
    """Connections moving runs back and forth at the same moment, a run per transaction as
    Threadline moves them (each connection on a shard of its own, some sharing one): no
    deadlock, no lost update."""
    seed_runs(conn, 400, claims=0)
    ids = [r["run_id"] for r in conn.execute("select run_id from threadline.run_threads")]
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with db.connect(db_url) as own:
                for _ in range(300):
                    state = rng.choice(("running", "failed", "completed", "waiting"))
                    step = rng.choice(("check", "deploy"))
                    own.execute(
                        "update threadline.run_threads set state = %s, current_step = %s"
                        " where run_id = %s",
                        (state, step, rng.choice(ids)),
                    )
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert_agree(conn)
    shards = conn.execute("select count(distinct shard) as n from threadline.run_counts").fetchone()
    assert shards["n"] > 1  # the writers really added to shards of their own


def test_folding_keeps_every_count_and_drops_empty_rows(conn, db_url):
    seed_runs(conn, 2000, claims=0)
    for _ in range(3):  # other backends, other shards, past days
        with db.connect(db_url) as other:
            other.execute(
                "update threadline.run_threads set state = 'failed', current_step = 'check'"
                " where run_id in (select run_id from threadline.run_threads"
                "                   where state = 'completed' and created_at < now() - interval"
                "                         '2 days' order by random() limit 100)"
            )
    with conn.transaction():  # every run of one past day goes: its rows sum to nothing
        conn.execute(
            "delete from threadline.run_threads where threadline.run_day(created_at)"
            " = threadline.run_day(now() - interval '10 days')"
        )
    before_counts, before_failures = kept(conn), failures_kept(conn)
    rows_before = conn.execute("select count(*) as n from threadline.run_counts").fetchone()["n"]
    removed = conn.execute("select threadline.fold_run_counts() as n").fetchone()["n"]
    rows_after = conn.execute("select count(*) as n from threadline.run_counts").fetchone()["n"]
    assert removed > 0 and rows_after == rows_before - removed
    assert kept(conn) == before_counts == counted(conn)
    assert failures_kept(conn) == before_failures == failures_counted(conn)
    past = conn.execute(
        "select count(*) as n from threadline.run_counts"
        " where day < threadline.run_day(now()) and (shard <> 0 or runs = 0)"
    ).fetchone()["n"]
    assert past == 0  # past days: one row per (day, workflow, state, step), none empty


def test_runs_of_real_processes_are_counted_as_they_move(conn, apply, procs):
    """Runs moved by a conductor and a bot, not by hand: each transition lands in the kept
    counts in its own transaction, and a failed run counts at the step it failed at."""
    apply("""
slug: counted
steps:
  - {id: fine, run_command: "true"}
  - {id: breaks, run_command: "exit 3", retries: 0}
""")
    apply("""
slug: counted-ok
steps:
  - {id: fine, run_command: "true"}
""")
    procs.start("conductor")
    procs.start("bots")
    failing = [spawn(conn, "counted").run_id for _ in range(2)]
    passing = [spawn(conn, "counted-ok").run_id for _ in range(3)]
    for run_id in failing:
        harness.wait_for_state(procs.url, run_id, "failed", timeout=60)
    for run_id in passing:
        harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert kept(conn, "counted") == counted(conn, "counted")
    assert kept(conn, "counted")["failed"] == 2
    assert kept(conn, "counted-ok")["completed"] == 3 == counted(conn, "counted-ok")["completed"]
    assert failures_kept(conn)[("counted", "breaks")] == 2
