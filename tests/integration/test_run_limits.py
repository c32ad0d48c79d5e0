"""Concurrency caps over all runs and per initiator, besides a workflow's own, against the real
database and a real conductor."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from engine_adapter.model.identity import Actor
from engine_adapter.runs import run_limits
from engine_adapter.runs.commands import CommandRefused, retry_run
from engine_adapter.runs.gates import decide
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

GATED = """
slug: gated
steps:
  - id: ok
    human_gate: "Go?"
"""
ADMIN = Actor("admin", "cli")


cli = harness.run_cli


def by(conn: psycopg.Connection, who: str, slug: str = "gated") -> str:
    return spawn(conn, slug, {}, trigger={"kind": "manual", "caller": who}).run_id


def state(conn: psycopg.Connection, run_id: str) -> str:
    return conn.execute(
        "select state from threadline.run_threads where run_id = %s", (run_id,)
    ).fetchone()["state"]


def thread(conn: psycopg.Connection, run_id: str) -> list[str]:
    rows = conn.execute(
        "select text from threadline.thread_entries where run_id = %s order by seq", (run_id,)
    ).fetchall()
    return [r["text"] for r in rows]


def test_an_initiator_cap_queues_only_that_initiators_runs(conn, apply, procs, db_url):
    apply(GATED)
    run_limits.set_limit(conn, "initiator:alice", 1, ADMIN)
    procs.start("conductor")
    first, second = by(conn, "alice"), by(conn, "alice")
    bobs = by(conn, "bob")
    harness.wait_for_state(db_url, first, "waiting")
    harness.wait_for_state(db_url, bobs, "waiting")  # bob is not held up behind alice
    assert state(conn, second) == "queued"
    assert (
        "Queued: 1 of 1 runs started by alice (limit initiator:alice) are active; "
        "it starts when a place is free." in thread(conn, second)
    )
    listed = {lim["scope"]: lim for lim in run_limits.list_limits(conn)}
    assert (listed["initiator:alice"]["active"], listed["initiator:alice"]["queued"]) == (1, 1)

    decide(conn, first, "approve", Actor("carol", "console"))
    harness.wait_for_state(db_url, first, "completed")
    harness.wait_for_state(db_url, second, "waiting")
    assert "Starting: a place is free." in thread(conn, second)


def test_a_rerun_for_someone_else_counts_against_whoever_ran_it(conn, apply, procs, db_url):
    """`rerun --as bob` records bob, but the run is alice's: her cap holds it, not a new
    "alice for bob" initiator with a cap of its own."""
    from engine_adapter.conductor.reruns import rerun

    apply(GATED)
    run_limits.set_limit(conn, "initiator:alice", 1, ADMIN)
    procs.start("conductor")
    first = by(conn, "alice")
    harness.wait_for_state(db_url, first, "waiting")
    again = rerun(conn, first, "ok", Actor("alice", "cli", on_behalf_of="bob")).run_id
    assert state(conn, again) == "queued"
    listed = {lim["scope"]: lim for lim in run_limits.list_limits(conn)}
    assert (listed["initiator:alice"]["active"], listed["initiator:alice"]["queued"]) == (1, 1)


def test_a_global_cap_counts_every_initiator_and_removing_it_starts_the_line(
    conn, apply, procs, db_url
):
    apply(GATED)
    procs.start("conductor")
    running = by(conn, "alice")  # started before any cap: it holds a place all the same
    harness.wait_for_state(db_url, running, "waiting")
    out = cli(db_url, "limits", "set", "global", "2")
    assert out.returncode == 0, out.stderr
    second, third, fourth = by(conn, "bob"), by(conn, "schedule"), by(conn, "dave")
    harness.wait_for_state(db_url, second, "waiting")
    assert [state(conn, r) for r in (third, fourth)] == ["queued", "queued"]
    assert (
        "Queued: 2 of 2 runs in all (limit global) are active; it starts when a place is free."
        in thread(conn, third)
    )
    assert any("1 ahead of it in line" in t for t in thread(conn, fourth))
    listing = cli(db_url, "limits")
    assert "global" in listing.stdout and "2 of 2 active, 2 queued" in listing.stdout

    out = cli(db_url, "limits", "remove", "global")
    assert out.returncode == 0 and "2 queued run(s) started" in out.stdout, out
    harness.wait_for_state(db_url, third, "waiting")
    harness.wait_for_state(db_url, fourth, "waiting")


def test_child_runs_hold_their_parents_place(conn, apply, procs, db_url):
    """Under a global cap of 1, a run's parallel branches (child runs) all run and count as its
    one place: while they sleep, the cap sees one run in flight, and another run waits."""
    apply("""
slug: fan
steps:
  - id: group
    parallel:
      a: [{id: x, sleep: 3s}]
      b: [{id: y, sleep: 3s}]
      c: [{id: z, sleep: 3s}]
""")
    run_limits.set_limit(conn, "global", 1, ADMIN)
    procs.start("conductor")
    run_id = by(conn, "alice", "fan")

    def branches_running() -> bool:
        return (
            conn.execute(
                "select count(*) as n from threadline.run_threads"
                " where parent_run_id = %s and state = 'sleeping'",
                (run_id,),
            ).fetchone()["n"]
            == 3
        )

    harness.wait_for(branches_running, what="the three branches to be under way")
    other = by(conn, "bob", "fan")
    caps = run_limits.Caps.of(conn, other)
    assert (caps.row["state"], caps.row["global_active"]) == ("queued", 1)
    harness.wait_for_state(db_url, run_id, "completed", timeout=60)
    harness.wait_for_state(db_url, other, "completed", timeout=60)  # started once the first ended


def test_concurrent_spawns_never_admit_past_a_global_cap(conn, apply, db_url):
    apply(GATED)
    run_limits.set_limit(conn, "global", 2, ADMIN)
    barrier = threading.Barrier(8)
    ids: list[str] = []

    def one(i: int) -> None:
        with db.connect(db_url) as c:
            barrier.wait()
            ids.append(by(c, f"user{i}"))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    states = [state(conn, r) for r in ids]
    assert len(ids) == 8 and states.count("queued") == 6
    assert run_limits.Caps.of(conn, ids[0]).row["global_active"] == 2


def test_a_retry_is_refused_while_the_initiators_cap_is_full(conn, apply, procs, db_url):
    apply("""
slug: failing
steps:
  - id: boom
    run_command: exit 3
""")
    apply(GATED)
    procs.start("conductor")
    procs.start("bots")
    failed = by(conn, "alice", "failing")
    harness.wait_for_state(db_url, failed, "failed")
    run_limits.set_limit(conn, "initiator:alice", 1, ADMIN)
    holder = by(conn, "alice")
    harness.wait_for_state(db_url, holder, "waiting")
    with pytest.raises(CommandRefused) as refused:
        retry_run(conn, failed, Actor("alice", "console"))
    assert "1 of 1 runs started by alice (limit initiator:alice) are active" in str(refused.value)
    assert state(conn, failed) == "failed"


@pytest.mark.parametrize(
    "args, message",
    [
        (("set", "team", "3"), "scope 'team' must be 'global' or 'initiator:NAME'"),
        (("set", "initiator:", "3"), "scope 'initiator:' must be"),
        (("set", "global", "0"), "max runs 0 must be a whole number of at least 1"),
        (("set", "global", "many"), "invalid int value: 'many'"),
        (("remove", "teams"), "scope 'teams' must be"),
    ],
)
def test_bad_limits_are_refused_naming_the_problem_and_change_nothing(
    conn, db_url, args: tuple[str, ...], message: str
):
    out = cli(db_url, "limits", *args)
    assert out.returncode != 0 and message in out.stderr, out
    rows: list[dict[str, Any]] = run_limits.list_limits(conn)
    assert rows == []
