"""Events, manual request ids and max_concurrent_runs against the real database and real
processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import psycopg
import pytest

from engine_adapter.catalog.workflows import set_enabled
from engine_adapter.model.identity import Actor, os_user
from engine_adapter.read.read_model import health, show_run
from engine_adapter.read.run_list import RunFilters, runs_page
from engine_adapter.runs.commands import CommandRefused, cancel_run, retry_run
from engine_adapter.runs.events import emit
from engine_adapter.runs.gates import decide
from engine_adapter.runs.spawn import SpawnError, manual_key, spawn
from engine_adapter.store import db
from engine_adapter.testing import harness


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, THREADLINE_DATABASE_URL=url)
    return subprocess.run(
        [sys.executable, "-m", "engine_adapter.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def count(conn: psycopg.Connection, table: str = "threadline.run_threads") -> int:
    return conn.execute(f"select count(*) as n from {table}").fetchone()["n"]


def listener(slug: str, event: str, step: str = "run_command: echo got {{payload.v}}") -> str:
    return f"slug: {slug}\non_event: {event}\nsteps:\n  - id: a\n    {step}\n"


def first_entry(conn: psycopg.Connection, run_id: str) -> str:
    return conn.execute(
        "select text from threadline.thread_entries where run_id = %s and seq = 1", (run_id,)
    ).fetchone()["text"]


# -- events ----------------------------------------------------------------------------------------
def test_an_event_starts_one_run_per_listening_workflow_idempotent_per_id(conn, apply):
    for slug, event in (
        ("on-deploy-a", "deploy.done"),
        ("on-deploy-b", "deploy.done"),
        ("on-other", "other"),
        ("on-deploy-off", "deploy.done"),
    ):
        apply(listener(slug, event))
    set_enabled(conn, "on-deploy-off", False)
    first = emit(conn, "deploy.done", {"v": 1}, event_id="e-1", caller="alice")
    assert [(r.workflow, r.created) for r in first.runs] == [
        ("on-deploy-a", True),
        ("on-deploy-b", True),
    ]
    again = emit(conn, "deploy.done", {"v": 2}, event_id="e-1", caller="bob")
    assert [(r.run_id, r.created) for r in again.runs] == [(r.run_id, False) for r in first.runs]
    other = emit(conn, "deploy.done", {"v": 3}, event_id="e-2")
    assert all(r.created for r in other.runs) and {r.run_id for r in other.runs}.isdisjoint(
        r.run_id for r in first.runs
    )
    assert count(conn) == 4
    run = conn.execute(
        "select trigger, payload from threadline.run_threads where run_id = %s",
        (first.runs[0].run_id,),
    ).fetchone()
    assert run["trigger"] == {
        "kind": "event",
        "event": "deploy.done",
        "event_id": "e-1",
        "caller": "alice",
    }
    assert run["payload"] == {"v": 1}
    assert first_entry(conn, first.runs[0].run_id).startswith(
        "Run of on-deploy-a v1 started by event deploy.done, id e-1, emitted by alice."
    )
    assert emit(conn, "nobody.listens").runs == []


def test_bad_events_are_refused_and_create_nothing(db_url, conn, apply):
    apply(listener("on-deploy", "deploy.done"))
    with pytest.raises(SpawnError, match="event name 'has space' must match"):
        emit(conn, "has space")
    with pytest.raises(SpawnError, match="payload must be a JSON object, not list"):
        emit(conn, "deploy.done", [1])
    bad_json = cli(db_url, "emit", "deploy.done", "--payload", "{nope")
    assert bad_json.returncode == 2 and "--payload: not valid JSON" in bad_json.stderr
    bad_id = cli(db_url, "emit", "deploy.done", "--id", "x" * 201)
    assert bad_id.returncode == 2 and "must be 1 to 200 characters" in bad_id.stderr
    assert count(conn) == 0 and count(conn, "absurd.t_threadline") == 0
    none = cli(db_url, "emit", "nobody.listens")
    assert (
        none.returncode == 0 and "no enabled workflow has on_event: nobody.listens" in none.stdout
    )


def test_emit_from_the_cli_runs_to_completion(db_url, conn, apply, procs):
    apply(listener("on-deploy", "deploy.done"))
    procs.start("conductor")
    procs.start("bots")
    out = cli(db_url, "emit", "deploy.done", "--payload", '{"v": 7}', "--id", "e-7", "--json")
    first = json.loads(out.stdout)
    assert first["event_id"] == "e-7" and [r["created"] for r in first["runs"]] == [True]
    again = json.loads(cli(db_url, "emit", "deploy.done", "--id", "e-7", "--json").stdout)
    assert again["runs"] == [dict(first["runs"][0], created=False)]
    run = harness.wait_for_state(db_url, first["runs"][0]["run_id"], "completed")
    assert run["steps"][0]["output"].strip() == "got 7"
    assert count(conn) == 1


# -- manual: client request ids --------------------------------------------------------------------
def test_spawn_request_id_makes_a_retried_command_one_run(db_url, conn, apply):
    apply(listener("manual", "unused"))
    one = cli(db_url, "spawn", "manual", "--request-id", "click-1", "--as", "alice")
    two = cli(db_url, "spawn", "manual", "--request-id", "click-1", "--as", "alice")
    assert one.returncode == two.returncode == 0
    assert (
        two.stdout.split()[0] == one.stdout.strip()
        and "existing run for this request id" in two.stdout
    )
    assert count(conn) == 1
    # Without an id a fresh one is made and printed, so the command can be retried with it.
    fresh = cli(db_url, "spawn", "manual", "--as", "bob")
    request_id = fresh.stderr.split()[2]
    assert f"repeat with --request-id {request_id}" in fresh.stderr
    retried = json.loads(
        cli(db_url, "spawn", "manual", "--request-id", request_id, "--json").stdout
    )
    assert retried == {"run_id": fresh.stdout.strip(), "created": False}
    as_json = json.loads(cli(db_url, "spawn", "manual", "--json").stdout)
    assert as_json["created"] and len(as_json["request_id"]) == 36
    assert count(conn) == 3
    trig = conn.execute(
        "select trigger from threadline.run_threads where run_id = %s", (one.stdout.strip(),)
    ).fetchone()["trigger"]
    me = os_user()  # the CLI's actor is its OS account; --as only says for whom
    assert trig == {
        "kind": "manual",
        "caller": me,
        "on_behalf_of": "alice",
        "request_id": "click-1",
    }
    assert first_entry(conn, one.stdout.strip()).startswith(
        f"Run of manual v1 started manually by {me} for alice, request click-1."
    )
    with pytest.raises(SpawnError, match="trigger kind 'cron' must be one of"):
        spawn(conn, "manual", trigger={"kind": "cron"})
    assert count(conn) == 3


def test_a_request_id_counts_once_per_workflow(db_url, conn, apply):
    """The same client request id for two workflows is two requests: two runs, one each."""
    apply(listener("wf-a", "unused"))
    apply(listener("wf-b", "unused"))
    a = json.loads(cli(db_url, "spawn", "wf-a", "--request-id", "1", "--json").stdout)
    b = json.loads(cli(db_url, "spawn", "wf-b", "--request-id", "1", "--json").stdout)
    assert a["created"] and b["created"] and a["run_id"] != b["run_id"]
    again = json.loads(cli(db_url, "spawn", "wf-b", "--request-id", "1", "--json").stdout)
    assert again == {"run_id": b["run_id"], "created": False}
    rows = conn.execute(
        "select workflow, idempotency_key from threadline.run_threads order by workflow"
    ).fetchall()
    assert [(r["workflow"], r["idempotency_key"]) for r in rows] == [
        ("wf-a", manual_key("wf-a", "1")),
        ("wf-b", manual_key("wf-b", "1")),
    ]
    assert manual_key("wf-a", "1") == "manual:wf-a:1"  # apart from schedule:, event:, webhook: keys


# -- concurrency -----------------------------------------------------------------------------------
GATED = """slug: limited
max_concurrent_runs: {limit}
steps:
  - id: hold
    human_gate: "Go on?"
"""


def states(conn: psycopg.Connection, run_ids: list[str]) -> list[str]:
    return [show_run(conn, r)["state"] for r in run_ids]


def test_runs_past_the_limit_queue_fifo_and_start_as_others_finish(db_url, conn, apply, procs):
    apply(GATED.format(limit=1))
    procs.start("conductor")
    procs.start("bots")
    a, b, c = (spawn(conn, "limited", {"n": i}).run_id for i in range(3))
    harness.wait_for_state(db_url, a, "waiting")
    assert states(conn, [b, c]) == ["queued", "queued"]
    # Queued everywhere: the run list, show, the CLI; and parked in the engine, holding no process.
    limited = runs_page(conn, RunFilters(workflow="limited")).rows
    assert [r.state for r in limited] == [
        "queued",
        "queued",
        "waiting",
    ]
    shown = show_run(conn, c)
    assert [s["status"] for s in shown["steps"]] == ["pending"]
    assert [e["text"] for e in shown["thread"]][1] == (
        "Queued: 1 of 1 runs of workflow 'limited' (max_concurrent_runs) are active, "
        "1 ahead of it in line; it starts when a place is free."
    )
    assert (
        f"{c}  limited" in cli(db_url, "runs").stdout and " queued " in cli(db_url, "runs").stdout
    )
    harness.wait_for(
        lambda: (
            conn.execute(
                "select count(*) filter (where state = 'sleeping') as n"
                " from absurd.r_threadline where task_id in (%s, %s)",
                (b, c),
            ).fetchone()["n"]
            == 2
        ),
        what="queued runs parked",
    )
    h = health(conn)
    assert h["status"] == "ok" and h["runnable_unclaimed"] == 0

    decide(
        conn, a, "approve", Actor("alice", "console")
    )  # a finishes: b (first in line) starts, c still waits
    harness.wait_for_state(db_url, a, "completed")
    harness.wait_for_state(db_url, b, "waiting")
    assert states(conn, [c]) == ["queued"]
    assert "Starting: a place is free (max_concurrent_runs 1)." in [
        e["text"] for e in show_run(conn, b)["thread"]
    ]

    assert cli(db_url, "cancel", b).returncode == 0  # cancelling frees the place as well
    harness.wait_for_state(db_url, c, "waiting")
    decide(conn, c, "approve", Actor("alice", "console"))
    harness.wait_for_state(db_url, c, "completed")
    started = conn.execute(
        "select run_id from threadline.run_threads where workflow = 'limited' order by admitted_at"
    ).fetchall()
    assert [str(r["run_id"]) for r in started] == [a, b, c]


def test_concurrent_spawns_never_admit_past_the_limit(db_url, conn, apply):
    """Ten spawns at once from ten connections: exactly `limit` runs are admitted, the rest queue in
    order; each finish admits the oldest queued run, in the finisher's own transaction."""
    apply(GATED.format(limit=2))
    barrier = threading.Barrier(10)
    ids: list[str] = []
    errors: list[BaseException] = []

    def spawner(i: int) -> None:
        try:
            with db.connect(db_url) as c:
                barrier.wait(timeout=60)
                ids.append(spawn(c, "limited", {"n": i}).run_id)
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=spawner, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors

    def snapshot() -> dict[str, list[str]]:
        rows = conn.execute(
            "select run_id, state, admitted_at is not null as admitted from threadline.run_threads "
            "where workflow = 'limited' order by queue_seq"
        ).fetchall()
        return {
            "admitted": [
                str(r["run_id"]) for r in rows if r["admitted"] and r["state"] != "cancelled"
            ],
            "queued": [str(r["run_id"]) for r in rows if r["state"] == "queued"],
        }

    before = snapshot()
    assert len(before["admitted"]) == 2 and len(before["queued"]) == 8
    cancel_run(conn, before["admitted"][0], Actor("alice", "console"))
    after = snapshot()
    assert set(after["admitted"]) == {
        before["admitted"][1],
        before["queued"][0],
    }  # the oldest queued one
    assert after["queued"] == before["queued"][1:]
    # The admitted run's admission event exists for its handler to find, even before it is claimed.
    ev = conn.execute(
        "select count(*) as n from absurd.e_threadline where event_name = %s",
        (f"threadline.run.admit:{before['queued'][0]}",),
    ).fetchone()["n"]
    assert ev == 1


def test_raising_or_removing_the_limit_admits_queued_runs_at_once(conn, apply):
    """No run finishes and no conductor runs: applying the raised limit admits in its own
    transaction (the conductor's sweep is only a backstop, every 10 s)."""
    apply(GATED.format(limit=1))
    run_ids = [spawn(conn, "limited", {"n": i}).run_id for i in range(4)]
    assert states(conn, run_ids) == ["pending", "queued", "queued", "queued"]
    apply(GATED.format(limit=1).replace('"Go on?"', '"Go on now?"'))  # a new version, same limit
    assert states(conn, run_ids) == ["pending", "queued", "queued", "queued"]
    apply(GATED.format(limit=2))
    assert states(conn, run_ids) == ["pending", "pending", "queued", "queued"]
    apply(GATED.format(limit=1))  # lowering admits nothing and stops no one
    assert states(conn, run_ids) == ["pending", "pending", "queued", "queued"]
    apply('slug: limited\nsteps:\n  - id: hold\n    human_gate: "Go on?"\n')  # no limit at all
    assert states(conn, run_ids) == ["pending"] * 4
    admitted = conn.execute(
        "select count(*) as n from absurd.e_threadline "
        "where event_name like 'threadline.run.admit:%%'"
    ).fetchone()["n"]
    assert admitted == 4  # one admission event per run: the first at its spawn
    # Without a limit any more, new runs are admitted at spawn and never queue.
    assert states(conn, [spawn(conn, "limited").run_id]) == ["pending"]


def test_a_spawn_that_waited_for_the_lock_does_not_jump_the_line(db_url, conn, apply):
    """The line is commit order: a spawn whose transaction began earlier but queued later (it
    waited) stands behind the runs queued meanwhile."""
    apply(GATED.format(limit=1))
    first = spawn(conn, "limited").run_id  # holds the one place
    with db.connect(db_url) as early:
        with early.transaction():
            early.execute("select 1")  # its transaction (and created_at) starts now
            meanwhile = spawn(conn, "limited").run_id  # queued and committed first
            late = spawn(early, "limited").run_id
        created = {
            r["run_id"]: r["created_at"]
            for r in conn.execute("select run_id::text, created_at from threadline.run_threads")
        }
    assert created[late] < created[meanwhile]  # the order a created_at line would use
    assert "1 ahead of it in line" in show_run(conn, late)["thread"][1]["text"]
    cancel_run(conn, first, Actor("alice", "console"))
    assert states(conn, [meanwhile, late]) == ["pending", "queued"]


def test_retry_is_refused_while_the_workflow_is_full(db_url, conn, apply, procs, tmp_path):
    """A failed run gave up its place: `threadline retry` takes one again only if there is room,
    under the same lock admission takes; a refused retry writes nothing."""
    apply("""slug: limited
max_concurrent_runs: 1
steps:
  - id: check
    run_command: test -e {{payload.flag}}
  - id: hold
    human_gate: "Go on?"
""")
    procs.start("conductor")
    procs.start("bots")
    (tmp_path / "b").touch()
    failed = spawn(conn, "limited", {"flag": str(tmp_path / "a")}).run_id
    harness.wait_for_state(db_url, failed, "failed")
    other = spawn(conn, "limited", {"flag": str(tmp_path / "b")}).run_id
    harness.wait_for_state(db_url, other, "waiting")

    def written() -> tuple[Any, ...]:
        entries = conn.execute(
            "select count(*) as n from threadline.thread_entries where run_id = %s", (failed,)
        ).fetchone()["n"]
        events = count(conn, "absurd.e_threadline")
        return entries, events, states(conn, [failed])

    before = written()
    with pytest.raises(CommandRefused) as refused:
        retry_run(conn, failed, Actor("alice", "console"))
    assert str(refused.value) == (
        f"run {failed} cannot be retried now: 1 of 1 runs of workflow 'limited' "
        "(max_concurrent_runs) are active; retry it when one of them finishes"
    )
    assert written() == before
    by_cli = cli(db_url, "retry", failed)
    assert by_cli.returncode == 2 and "cannot be retried now" in by_cli.stderr
    assert written() == before

    decide(conn, other, "approve", Actor("alice", "console"))
    harness.wait_for_state(db_url, other, "completed")
    (tmp_path / "a").touch()
    retry_run(conn, failed, Actor("alice", "console"))
    harness.wait_for_state(db_url, failed, "waiting")


def test_the_admission_sweep_logs_a_failure_and_goes_on(db_url, conn, apply, caplog):
    """The conductor's backstop sweep never raises into its loop: a workflow whose admission fails
    is logged with its slug, and the other workflows' queued runs are still admitted."""
    from engine_adapter.conductor.conductor import Conductor

    for slug in ("free", "stuck"):
        apply(GATED.format(limit=1).replace("slug: limited", f"slug: {slug}"))
    runs = {slug: [spawn(conn, slug).run_id for _ in range(2)] for slug in ("free", "stuck")}
    # A limit raised behind apply_recipe's back (so nothing admitted), and admission of "stuck"
    # made to fail.
    conn.execute(
        "update threadline.workflows set recipe = recipe || '{\"max_concurrent_runs\": 5}'"
    )
    conn.execute(
        "alter table threadline.run_threads add constraint stuck_refused "
        "check (workflow <> 'stuck' or state <> 'pending') not valid"
    )
    conductor = Conductor(db_url)
    try:
        assert conductor.readmit() == 1
    finally:
        conductor.close()
    assert "admission sweep failed for workflow stuck" in caplog.text
    assert states(conn, runs["free"]) == ["pending", "pending"]
    assert states(conn, runs["stuck"]) == ["pending", "queued"]
