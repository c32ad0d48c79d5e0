"""Threadline owns its runs' history: a run's steps survive any cleanup of the engine's tables."""

from __future__ import annotations

from console.debug_pane import debug_html
from engine_adapter.read.engine_debug import run_debug
from engine_adapter.read.read_model import show_run
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness


def test_show_keeps_a_runs_steps_after_the_engines_cleanup(conn, apply, procs, db_url):
    apply("""
slug: kept
steps:
  - id: first
    run_command: echo one
  - id: second
    run_command: echo two
    if: steps.first.status == "completed"
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "kept").run_id
    harness.wait_for_state(db_url, run_id, "completed")
    before = show_run(conn, run_id)

    # What `absurdctl cleanup threadline 0` does: every finished task, its runs and checkpoints.
    deleted = conn.execute("select absurd.cleanup_tasks('threadline', 0, 1000) as n").fetchone()[
        "n"
    ]
    assert deleted >= 1
    left = conn.execute(
        "select count(*) as n from absurd.c_threadline where task_id = %s", (run_id,)
    ).fetchone()["n"]
    assert left == 0

    after = show_run(conn, run_id)
    assert after["state"] == "completed"
    assert [(s["id"], s["status"], s["output"]) for s in after["steps"]] == [
        ("first", "completed", "one\n"),
        ("second", "completed", "two\n"),
    ]
    assert after["steps"] == before["steps"]
    assert harness.run_cli(db_url, "show", run_id).stdout.count("completed") >= 2
    # The debug pane, the engine's side, says its rows are gone rather than showing nothing.
    assert "The engine's rows of this run are gone" in debug_html(run_debug(conn, run_id))
