"""The global pause switch: new runs are refused with a clear message, wherever they come from;
runs in flight go on, with the child runs they start and the events they wait for."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import test_webhooks

from engine_adapter.model.identity import Actor
from engine_adapter.runs import gates, schedules
from engine_adapter.runs.events import emit
from engine_adapter.testing import harness

IN_FLIGHT = """
slug: in-flight
steps:
  - id: ask
    human_gate: "Go on?"
  - id: fan
    parallel:
      a: [{id: a1, run_command: echo a}]
      b: [{id: b1, run_command: echo b}]
  - id: hear
    wait_for_event: go
"""
LISTENER = "slug: listener\non_event: go\nsteps:\n  - id: s\n    run_command: echo heard\n"
CRON = "slug: every-minute\nschedule: '* * * * *'\nsteps:\n  - id: s\n    run_command: 'true'\n"


def runs(conn) -> int:
    return conn.execute("select count(*) as n from threadline.run_threads").fetchone()["n"]


def test_pause_refuses_new_runs_and_lets_runs_in_flight_finish(db_url, conn, apply, procs):
    apply(IN_FLIGHT)
    apply(LISTENER)
    apply(CRON)
    procs.start("conductor")
    procs.start("bots")
    started = harness.run_cli(db_url, "spawn", "in-flight", "--json")
    run_id = json.loads(started.stdout)["run_id"]
    harness.wait_for_state(procs.url, run_id, "waiting", timeout=30)

    paused = harness.run_cli(db_url, "pause", "--reason", "deploy freeze")
    assert paused.returncode == 0 and "deploy freeze" in paused.stdout
    before = runs(conn)
    refused = harness.run_cli(db_url, "spawn", "in-flight")
    assert refused.returncode == 2
    assert "Threadline is paused" in refused.stderr and "deploy freeze" in refused.stderr
    assert "`threadline unpause` lifts it" in refused.stderr
    later = datetime.now(UTC) + timedelta(minutes=5)
    assert schedules.tick(conn, later) == []  # no slot fires while paused
    health = json.loads(harness.run_cli(db_url, "health", "--json").stdout)
    assert "deploy freeze" in health["paused"]

    # The run in flight goes on: its gate, its branches (child runs), and its event.
    gates.decide(conn, run_id, "approve", Actor("alice", "console"))
    harness.wait_for(
        lambda: (
            harness.wait_for_state(procs.url, run_id, ("waiting", "completed"))["gate"] is None
            and conn.execute(
                "select count(*) as n from threadline.event_waits where run_id = %s", (run_id,)
            ).fetchone()["n"]
        ),
        timeout=60,
        what="the run to reach its wait_for_event",
    )
    emitted = emit(conn, "go", {})
    assert emitted.runs == [] and "deploy freeze" in emitted.paused  # the listener did not start
    assert len(emitted.released) == 1
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert [s["status"] for s in view["steps"]] == ["completed"] * 3
    assert runs(conn) == before + 2  # the two branches, and nothing else

    assert "unpaused" in harness.run_cli(db_url, "unpause").stdout
    assert harness.run_cli(db_url, "spawn", "listener").returncode == 0
    assert [f.workflow for f in schedules.tick(conn, later)] == ["every-minute"]


hooks = test_webhooks.hooks  # the fixture that starts `threadline hooks` on a free port
OPEN_HOOK = "slug: open\nwebhooks:\n  - path: open\nsteps:\n  - id: s\n    run_command: 'true'\n"


def test_webhooks_and_the_contract_hear_why_while_paused(db_url, conn, apply, hooks):
    apply(OPEN_HOOK)
    base = hooks(env={})
    assert harness.run_cli(db_url, "pause").returncode == 0
    status, answer, headers = test_webhooks.request(base, "POST", "/hooks/open", b"{}")
    assert status == 503 and "Threadline is paused" in answer["error"]
    assert headers["Retry-After"] == "60"  # a sender retries later: the delivery is not lost
    done = harness.run_cli(db_url, "run", stdin='{"workflow": "open"}')
    envelope = json.loads(done.stdout)
    assert done.returncode == 30 and envelope["error"]["type"] == "policy_violation"
    assert runs(conn) == 0
