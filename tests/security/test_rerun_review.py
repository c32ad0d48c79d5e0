"""A rerun gets past neither a person's decision nor a protected workflow's review: it carries a
gate's decision only into a run of the same payload, and runs an older version of a protected
workflow only where going back to that version needs no reviewed proposal. Each refusal names the
step or the version and writes nothing; real conductor and bots processes run the runs."""

from __future__ import annotations

import pytest

from engine_adapter.catalog import workflows
from engine_adapter.catalog.workflows import ProtectedChange
from engine_adapter.conductor import reruns
from engine_adapter.model.identity import Actor
from engine_adapter.runs import gates
from engine_adapter.runs.commands import CommandRefused
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

OPERATOR = Actor("otto", "console", roles=frozenset({"operator"}))
ALICE = Actor("alice", "console", roles=frozenset({"approver"}))
UNGATED = """
slug: ship
protected: true
allow_proposals: true
steps:
  - id: build
    run_command: echo "built {{payload.what}}"
  - id: ship
    run_command: echo "shipped {{payload.what}}" >> {{payload.dir}}/shipped
"""
# A gate in a parallel branch (a run of its own) between building and shipping.
CHECKS = """  - id: checks
    parallel:
      review:
        - id: ask
          human_gate: "Ship {{payload.what}}?"
          approvers: [alice]
      lint:
        - id: lint
          run_command: "true"
"""
GATED = UNGATED.replace("  - id: ship\n", CHECKS + "  - id: ship\n")
COUNTS = (
    "select (select count(*) from threadline.run_threads) as runs,"
    " (select count(*) from threadline.thread_entries) as entries"
)


def waiting_branch(conn, run_id: str, what: str) -> str:
    """The run's one parallel branch waiting at its gate, once there is one."""
    query = (
        "select run_id from threadline.run_threads where parent_run_id = %s and state = 'waiting'"
    )
    harness.wait_for(
        lambda: conn.execute(query, (run_id,)).fetchone() is not None, timeout=30, what=what
    )
    return str(conn.execute(query, (run_id,)).fetchone()["run_id"])


def shipped(tmp_path) -> list[str]:
    path = tmp_path / "shipped"
    return path.read_text().splitlines() if path.exists() else []


def test_a_gates_decision_is_carried_only_into_a_rerun_of_the_same_payload(
    conn, apply, procs, tmp_path
):
    apply(GATED)
    procs.start("conductor")
    procs.start("bots")
    first = spawn(conn, "ship", {"what": "docs-typo", "dir": str(tmp_path)}).run_id
    branch = waiting_branch(conn, first, "the branch waiting at its gate")
    gates.decide(conn, branch, "approve", ALICE)  # alice approved shipping "docs-typo"
    harness.wait_for_state(procs.url, first, "completed", timeout=30)
    assert shipped(tmp_path) == ["shipped docs-typo"]

    before = conn.execute(COUNTS).fetchone()
    refused = r"alice decided \(approve\) at step ask .*\(rerun from step checks or earlier\)"
    with pytest.raises(CommandRefused, match=refused):
        reruns.rerun(conn, first, "ship", OPERATOR, {"what": "DROP", "dir": str(tmp_path)})
    assert conn.execute(COUNTS).fetchone() == before  # nothing written

    # The same payload carries the decision: the rerun ships what alice approved, once more.
    again = reruns.rerun(conn, first, "ship", OPERATOR).run_id
    harness.wait_for_state(procs.url, again, "completed", timeout=30)
    # A rerun of that rerun carries the same decision: it is alice's, made in the first run.
    with pytest.raises(CommandRefused, match=rf"alice decided .* payload of run {first}"):
        reruns.rerun(conn, again, "ship", OPERATOR, {"what": "DROP", "dir": str(tmp_path)})
    # Another payload from the gated step on asks alice again.
    asked = reruns.rerun(conn, first, "checks", OPERATOR, {"what": "v2", "dir": str(tmp_path)})
    waiting_branch(conn, asked.run_id, "the rerun's gate asking again")
    assert shipped(tmp_path) == ["shipped docs-typo", "shipped docs-typo"]


def test_an_older_version_of_a_protected_workflow_reruns_only_without_review_to_skip(
    conn, apply, procs, tmp_path
):
    apply(UNGATED)
    procs.start("conductor")
    procs.start("bots")
    old = spawn(conn, "ship", {"what": "x", "dir": str(tmp_path)}).run_id
    harness.wait_for_state(procs.url, old, "completed", timeout=30)
    apply(UNGATED.replace("  - id: ship", "  - id: ask\n    human_gate: Ship?\n  - id: ship"))
    # version 2 adds a gate: a change that needs no review
    with pytest.raises(ProtectedChange):  # going back to version 1 would need one
        workflows.rollback(conn, "ship", "1", OPERATOR)

    before = conn.execute(COUNTS).fetchone()
    for payload in (None, {"what": "EVIL", "dir": str(tmp_path)}):
        with pytest.raises(CommandRefused, match=r"ran version 1 of workflow ship.*protected"):
            reruns.rerun(conn, old, "build", OPERATOR, payload)
    assert conn.execute(COUNTS).fetchone() == before
    assert shipped(tmp_path) == ["shipped x"]


def test_a_decision_at_a_top_level_gate_stays_with_its_payload(conn, apply, procs, tmp_path):
    apply(
        UNGATED.replace("protected: true\n", "").replace(
            "  - id: ship", "  - id: ask\n    human_gate: Ship?\n  - id: ship"
        )
    )
    procs.start("conductor")
    procs.start("bots")
    first = spawn(conn, "ship", {"what": "a", "dir": str(tmp_path)}).run_id
    harness.wait_for_state(procs.url, first, "waiting", timeout=30)
    gates.decide(conn, first, "approve", ALICE)
    harness.wait_for_state(procs.url, first, "completed", timeout=30)
    refused = r"alice decided \(approve\) at step ask .*\(rerun from step ask or earlier\)"
    with pytest.raises(CommandRefused, match=refused):
        reruns.rerun(conn, first, "ship", OPERATOR, {"what": "b", "dir": str(tmp_path)})
    # Before the gate, another payload is fine: the rerun asks again.
    asked = reruns.rerun(conn, first, "ask", OPERATOR, {"what": "b", "dir": str(tmp_path)})
    harness.wait_for_state(procs.url, asked.run_id, "waiting", timeout=30)
    assert shipped(tmp_path) == ["shipped a"]
