"""A recipe's run policy: `timeout` cancels a run that goes on too long (with its child runs),
`max_steps` one that would start more step tries (a loop that never ends)."""

from __future__ import annotations

import pytest

from engine_adapter.recipes.recipes import RecipeError
from engine_adapter.runs import child_runs
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness


def test_a_run_past_its_timeout_is_cancelled_with_its_children(conn, apply, procs):
    apply("""
slug: slow
timeout: 8s
steps:
  - id: fan
    parallel:
      a: [{id: a1, run_command: sleep 60}]
      b: [{id: b1, run_command: sleep 60}]
""")
    procs.start("conductor", wait=True)
    procs.start("bots", wait=True)
    run_id = spawn(conn, "slow").run_id

    def children() -> list[str]:
        return [
            c["state"]
            for c in conn.execute(
                "select state from threadline.run_threads where parent_run_id = %s", (run_id,)
            ).fetchall()
        ]

    # Both branches run before the timeout ends the run (on a loaded machine the time a run
    # takes to reach its group is not the timeout's to spend: it has room for it).
    harness.wait_for(lambda: children() == ["running", "running"], 8, what="both branches")
    view = harness.wait_for_state(procs.url, run_id, "cancelled", timeout=30)
    assert "Run cancelled: its policy: the run's timeout (8s) passed." in [
        e["text"] for e in view["thread"]
    ]
    assert children() == ["cancelled", "cancelled"]


def test_max_steps_ends_a_loop_that_never_ends(conn, apply, procs):
    apply("""
slug: forever
max_steps: 5
steps:
  - id: again
    repeat:
      - id: tick
        run_command: echo tick
    until: "false"
    max_iterations: 1000
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "forever").run_id
    view = harness.wait_for_state(procs.url, run_id, "cancelled", timeout=60)
    assert "Run cancelled by its policy: it would start more than 5 step tries (max_steps)." in [
        e["text"] for e in view["thread"]
    ]
    ticks = conn.execute(
        "select count(*) as n from threadline.step_claims where run_id = %s", (run_id,)
    ).fetchone()["n"]
    assert ticks == 5


def test_run_policy_fields_are_checked(apply):
    with pytest.raises(RecipeError) as info:
        apply("slug: bad\ntimeout: soon\nmax_steps: 0\nsteps: [{id: s, run_command: 'true'}]\n")
    assert info.value.errors[0].startswith("timeout: ")
    assert info.value.errors[1] == "max_steps: 0 must be an integer from 1 to 100000"


def test_a_branch_is_not_started_once_its_run_was_cancelled(conn, apply):
    """The race the timeout sweep and a handler can run: the tree is cancelled (its children with
    it) while the handler is about to start its next branch. That branch must not start; the
    handler is told so (the conductor stops it as a cancelled run), and nothing was written."""
    apply("""
slug: fanned
steps:
  - id: fan
    parallel:
      a: [{id: a1, run_command: "true"}]
""")
    run = spawn(conn, "fanned")
    with conn.transaction():
        assert child_runs.cancel_run_tree(conn, str(run.run_id), "a test")
    recipe = conn.execute(
        "select recipe from threadline.run_threads where run_id = %s", (run.run_id,)
    ).fetchone()["recipe"]
    entries = thread_length(conn, run.run_id)
    branch = child_runs.Branch("a", [{"id": "a1", "run_command": "true"}], "branch")
    with pytest.raises(child_runs.ParentEnded, match="cancelled: it starts no child run"):
        child_runs.spawn_branch(conn, str(run.run_id), recipe, {}, "fan", 1, branch, {})
    with pytest.raises(child_runs.ParentEnded):
        child_runs.spawn_workflow(conn, str(run.run_id), "fanned", {}, "fan", 1)
    children = conn.execute(
        "select count(*) as n from threadline.run_threads where parent_run_id = %s",
        (run.run_id,),
    ).fetchone()["n"]
    assert children == 0 and thread_length(conn, run.run_id) == entries


def thread_length(conn, run_id) -> int:
    return conn.execute(
        "select count(*) as n from threadline.thread_entries where run_id = %s", (run_id,)
    ).fetchone()["n"]
