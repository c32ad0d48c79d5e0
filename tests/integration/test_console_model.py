"""What the console reads, against a real database: keyset pages, filters, counts, charts,
open gates, the engine debug view and the live change feed."""

from __future__ import annotations

import signal
import threading
from datetime import datetime

from bench.seed import seed_runs
from console.live import Change, LiveHub
from engine_adapter.model.identity import Actor
from engine_adapter.model.names import short_run_id
from engine_adapter.read import engine_debug, read_model, run_list
from engine_adapter.read.run_list import RunFilters
from engine_adapter.runs import gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

GATED = """
slug: gated
bot: local
steps:
  - id: check
    run_command: echo checked {{ payload.n }}
  - id: ok
    human_gate: "Ship {{ payload.n }}?"
    timeout: 1h
"""


def test_keyset_pages_cover_every_run_once_in_order(conn):
    seed_runs(conn, 1234, claims=100)
    seen, cursor, pages = [], None, 0
    while True:
        page = run_list.runs_page(conn, RunFilters(), cursor, limit=50)
        seen += page.rows
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 25 and len(seen) == 1234 == len({r.run_id for r in seen})
    keys = [(r.created_at, r.run_id) for r in seen]
    assert keys == sorted(keys, reverse=True)


def test_filters_search_and_counts_agree(conn):
    seed_runs(conn, 700, claims=100)
    failed = RunFilters(state="failed", workflow="seed-2")
    rows = run_list.runs_page(conn, failed, limit=500).rows
    assert rows and all(r.state == "failed" and r.workflow == "seed-2" for r in rows)
    counts = run_list.state_counts(
        conn, failed
    )  # counts ignore the state filter: one pill per state
    assert counts["failed"] == len(rows) and counts["completed"] > 0 and sum(counts.values()) == 140
    webhook = run_list.runs_page(conn, RunFilters(trigger="webhook"), limit=500).rows
    assert len(webhook) == 175 and {r.trigger_kind for r in webhook} == {"webhook"}
    hit = run_list.runs_page(conn, RunFilters(search='"T-7919"')).rows  # inside the payload
    assert len(hit) == 1
    by_id = run_list.runs_page(conn, RunFilters(search=hit[0].run_id[:18])).rows  # by run id prefix
    assert [r.run_id for r in by_id] == [hit[0].run_id]
    by_short = run_list.runs_page(conn, RunFilters(search=short_run_id(hit[0].run_id))).rows
    assert [r.run_id for r in by_short] == [hit[0].run_id]  # the short form the console shows
    assert (
        run_list.runs_page(conn, RunFilters(search="100%")).rows == []
    )  # % is a character, not a wildcard
    newest = run_list.runs_page(conn, RunFilters(), limit=1).rows[0].created_at
    recent = run_list.runs_page(conn, RunFilters(since=newest), limit=500).rows
    assert len(recent) == 1


def test_chart_data_is_bounded_to_its_window(conn):
    seed_runs(conn, 2000, claims=300)
    data = run_list.chart_data(conn, RunFilters())
    since = data["window"]["since"]
    assert since == run_list.utc_day(since) and since.hour == 0  # whole UTC days
    in_window = conn.execute(
        "select count(*) as n from threadline.run_threads where created_at >= %s", (since,)
    ).fetchone()["n"]
    assert 2000 * 7 / 30 - 3 < in_window < 2000 * 8 / 30 + 3  # today and the 7 days before
    assert sum(r["runs"] for r in data["over_time"]) == in_window
    assert 0 < len(data["durations"]) <= 300
    assert {r["workflow"] for r in data["failures"]} <= {f"seed-{i}" for i in range(1, 6)}
    assert all(r["runs"] > 0 for r in data["failures"])


def test_a_gate_waits_since_its_question_whatever_its_thread_says_since(conn, db_url, procs, apply):
    """Needs you lists gates oldest first by when each was asked: a reply that decides nothing
    (or a notifier's note) in an older run's thread does not make it the newer."""
    procs.start("conductor")
    procs.start("bots")
    apply(GATED)
    older = spawn(conn, "gated", {"n": 1}).run_id
    harness.wait_for_state(db_url, older, "waiting")
    newer = spawn(conn, "gated", {"n": 2}).run_id
    harness.wait_for_state(db_url, newer, "waiting")
    asked = {
        g["run_id"]: g["waiting_since"] for g in read_model.open_gates(conn)
    }  # before the reply
    replied = harness.run_cli(db_url, "reply", older, "who owns this?", "--as", "bob")
    assert replied.returncode == 0, replied.stderr
    gates_now = read_model.open_gates(conn)
    assert [g["run_id"] for g in gates_now] == [older, newer]
    assert {g["run_id"]: g["waiting_since"] for g in gates_now} == asked
    assert asked[older] < asked[newer]


def test_open_gates_debug_view_and_live_feed(conn, db_url, procs, apply):
    hub = LiveHub(db_url)
    changes: list[Change] = []
    got = threading.Event()

    def listener(change: Change) -> None:
        changes.append(change)
        if change.run_ids:
            got.set()

    hub.subscribe(listener)
    hub.start()
    try:
        harness.wait_for(lambda: hub.beat is not None, what="the first liveness read")
        assert hub.beat["status"] == "down"  # nothing started yet
        procs.start("conductor")
        procs.start("bots")
        harness.wait_for(lambda: hub.beat["status"] == "ok", what="the feed to see the conductor")
        apply(GATED)
        run_id = spawn(conn, "gated", {"n": 7}).run_id
        assert got.wait(10), "the feed announced no change for the new run"
        assert any(run_id in c.run_ids and "run_threads" in c.tables for c in changes)
        harness.wait_for_state(db_url, run_id, "waiting")

        open_gates = read_model.open_gates(conn)
        assert [(g["run_id"], g["step"], g["question"]) for g in open_gates] == [
            (run_id, "ok", "Ship 7?")
        ]
        assert open_gates[0]["deadline"] is not None

        # The run shows `waiting` once its question is posted; its await follows a moment later.
        debug = harness.wait_for(
            lambda: (d := engine_debug.run_debug(conn, run_id))["awaiting"] and d,
            what="the gate's await",
        )
        names = [c["name"] for c in debug["checkpoints"]]
        assert "send:check:1" in names and "done:check:1" in names and "send:ok:1" in names
        assert [w["event"] for w in debug["awaiting"]] == [f"threadline.step.done:{run_id}:ok:1"]
        assert debug["awaiting"][0]["timeout_at"] is not None
        emitted = {e["name"]: e["emitted"] for e in debug["events"]}
        assert emitted == {
            f"threadline.step.done:{run_id}:check:1": True,
            f"threadline.step.done:{run_id}:ok:1": False,
        }  # awaited, not yet emitted
        assert (
            debug["attempts"][0]["attempt"] == 1
            and "send:check:1" in debug["attempts"][0]["executed"]
        )
        assert debug["bot_attempts"][0]["outcome"] == "completed"

        gates.decide(conn, run_id, "approve", Actor("ann", "console"))
        harness.wait_for_state(db_url, run_id, "completed")
        assert read_model.open_gates(conn) == []
        run = read_model.show_run(conn, run_id)
        assert run["gate"] is None and all(
            s["started_at"] and s["finished_at"] for s in run["steps"]
        )
    finally:
        hub.stop()


def test_debug_view_shows_which_steps_a_second_attempt_replayed(conn, db_url, procs, apply):
    """A conductor SIGKILLed while it holds the run (waiting in memory for the step's done event,
    with executors idle beside it): attempt 2 replays attempt 1's checkpoints. (A run no
    executor holds parks in its SEND's transaction, and a conductor killed then loses nothing.)"""
    apply("""
slug: two
bot: local
steps:
  - id: first
    run_command: sleep 2; echo one
  - id: second
    run_command: echo two
""")
    apply("""
slug: warm
bot: local
steps:
  - id: only
    run_command: "true"
""")
    procs.start("bots", wait=True)
    doomed = procs.start("conductor", env={"THREADLINE_CONDUCTOR_HOLD_MS": "60000"}, wait=True)
    warm = spawn(conn, "warm", {}).run_id  # once it is done, the executors wait for work
    harness.wait_for_state(db_url, warm, "completed", timeout=60)
    run_id = spawn(conn, "two", {}).run_id
    harness.wait_for(
        lambda: conn.execute(
            "select 1 from threadline.step_claims where step_key = %s", (f"{run_id}:first:1",)
        ).fetchone(),
        what="the bot to take the first step",
    )
    doomed.send_signal(signal.SIGKILL)
    assert doomed.wait(timeout=30) == -9
    procs.start("conductor")
    harness.wait_for_state(db_url, run_id, "completed", timeout=60)
    attempts = engine_debug.run_debug(conn, run_id)["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["state"] == "failed" and attempts[0]["executed"] == ["send:first:1"]
    assert attempts[1]["replayed"] == ["send:first:1"]
    assert (
        "send:first:1" not in attempts[1]["executed"] and "send:second:1" in attempts[1]["executed"]
    )


def test_debug_view_of_a_run_awaiting_its_bot_and_sleep_times(conn, db_url, procs, apply):
    """The engine stores 'await with no timeout' as an infinite wake time: the debug view reads it
    as none. A sleep step finishes at its wake time, not when it started sleeping."""
    apply("""
slug: slow
bot: local
steps:
  - id: nap
    sleep: 1s
  - id: work
    run_command: sleep 3; echo done
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "slow", {}).run_id
    harness.wait_for(
        lambda: conn.execute(
            "select 1 from threadline.step_claims where step_key = %s", (f"{run_id}:work:1",)
        ).fetchone(),
        what="the bot to take the step",
    )
    harness.wait_for(
        lambda: engine_debug.run_debug(conn, run_id)["awaiting"], what="the run to park"
    )
    debug = engine_debug.run_debug(conn, run_id)
    assert debug["attempts"][0]["available_at"] is None and debug["sleep_until"] is None
    assert [w["event"] for w in debug["awaiting"]] == [f"threadline.step.done:{run_id}:work:1"]
    nap = read_model.show_run(conn, run_id)["steps"][0]
    slept = datetime.fromisoformat(nap["finished_at"]) - datetime.fromisoformat(nap["started_at"])
    # It ends at its planned wake time; it starts when its plan was recorded, a few ms after the
    # clock reading the wake time was computed from (so a little under the full second).
    assert nap["status"] == "completed" and nap["finished_at"] == nap["output"]
    assert slept.total_seconds() >= 0.9


def test_a_starting_conductor_forgets_processes_dead_for_a_day(conn, procs):
    conn.execute(
        "insert into threadline.workers (id, kind, host, pid, lock_key, last_beat_at, version) "
        "values ('old-bot', 'bots', 'h', 1, nextval('threadline.worker_lock_keys'), "
        "now() - interval '2 days', 'x'), ('recent-bot', 'bots', 'h', 2, "
        "nextval('threadline.worker_lock_keys'), now() - interval '2 hours', 'x')"
    )
    procs.start("conductor", wait=True)
    ids = lambda: {w["id"] for w in read_model.workers_overview(conn)}  # noqa: E731
    harness.wait_for(lambda: "old-bot" not in ids(), what="the old process to be forgotten")
    assert "recent-bot" in ids()  # recent dead ones stay visible as dead
