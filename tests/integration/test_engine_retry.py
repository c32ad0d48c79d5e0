"""When the engine itself gave up on a run (a conductor crash loop, a handler bug: its task has
failed), `threadline retry` retries it in place: the thread says so, in the retrier's name, and
the run goes on from where it was."""

from __future__ import annotations

from engine_adapter.model.identity import Actor
from engine_adapter.runs import gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

QUEUE = "threadline"
GATED = """
slug: gated
steps:
  - id: ask
    human_gate: "Go ahead?"
  - id: after
    run_command: echo after {{steps.ask.output}}
"""


def give_up(conn, run_id: str) -> None:
    """What the engine does after a task's last failed attempt, done to a parked run."""
    with conn.transaction():
        conn.execute(
            f"update absurd.t_{QUEUE} set max_attempts = attempts where task_id = %s", (run_id,)
        )
        conn.execute(
            f'select absurd.fail_run(%s, last_attempt_run, \'{{"name": "gave up"}}\'::jsonb)'
            f" from absurd.t_{QUEUE} where task_id = %s",
            (QUEUE, run_id),
        )
    state = conn.execute(
        f"select state from absurd.t_{QUEUE} where task_id = %s", (run_id,)
    ).fetchone()
    assert state["state"] == "failed"


def test_a_run_the_engine_gave_up_on_is_retried_in_place(conn, apply, procs):
    apply(GATED)
    procs.start("conductor")
    procs.start("bots")
    run_id = str(spawn(conn, "gated").run_id)
    harness.wait_for_state(procs.url, run_id, "waiting")
    give_up(conn, run_id)
    out = harness.run_cli(procs.url, "retry", run_id, home=procs.home)
    assert out.returncode == 0, out.stderr
    entry = conn.execute(
        "select author_kind, author, kind, text, data from threadline.thread_entries"
        " where run_id = %s and kind = 'decision' order by seq desc limit 1",
        (run_id,),
    ).fetchone()
    assert entry["author_kind"] == "human" and entry["kind"] == "decision"
    assert entry["text"].startswith(f"Retry requested by {entry['author']} (engine retry)."), entry
    assert entry["data"]["bot_settings_changed"] is None and entry["data"]["actor"]
    task = conn.execute(
        f"select state from absurd.t_{QUEUE} where task_id = %s", (run_id,)
    ).fetchone()
    assert task["state"] != "failed"
    # The run took up where it was: at its gate, which a decision still releases.
    harness.wait_for_state(procs.url, run_id, "waiting")
    gates.decide(conn, run_id, "approve", Actor("bob", "console"))
    view = harness.wait_for_state(procs.url, run_id, "completed")
    assert view["steps"][1]["output"].startswith("after")
