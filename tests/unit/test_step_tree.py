"""The step tree read back from checkpoints alone (no database): statuses, branches, loops."""

from __future__ import annotations

from datetime import UTC, datetime

from engine_adapter.model import names
from engine_adapter.read import step_tree
from engine_adapter.recipes.recipes import load_recipe_text

RECIPE = """
slug: t
steps:
  - id: check
    run_command: make check
    on_failure: continue
  - id: fix
    if: steps.check.status == "failed"
    then:
      - id: repair
        run_command: make repair
    else:
      - id: celebrate
        run_command: echo ok
  - id: poll
    repeat:
      - id: probe
        run_command: probe
    until: steps.probe.exit_code == 0
    max_iterations: 5
  - id: notify
    if: payload.loud
    run_command: echo loud
"""


def facts(checkpoints: dict, state: str = "running", current: str | None = None):
    run = {
        "recipe": load_recipe_text(RECIPE).to_dict(),
        "current_step": current,
        "await_kind": "bot",
    }
    at = datetime(2026, 11, 23, tzinfo=UTC)
    return step_tree.RunFacts(
        run=run,
        state=state,
        checkpoints=checkpoints,
        written_at={k: at for k in checkpoints},
        claims=[],
    )


def test_a_run_in_its_second_iteration():
    cp = names.checkpoint
    tree = step_tree.steps_tree(
        facts(
            {
                cp(names.SEND, "check", 1): {"ok": True},
                cp(names.DONE, "check", 1): {"status": "failed", "output": "boom", "exit_code": 2},
                cp(names.DECIDE, "fix", 1): {"value": True, "why": "`...` is true"},
                cp(names.SEND, "repair", 1): {"ok": True},
                cp(names.DONE, "repair", 1): {"status": "completed", "output": "fixed"},
                cp(names.SEND, "poll[1]/probe", 1): {"ok": True},
                cp(names.DONE, "poll[1]/probe", 1): {"status": "completed", "exit_code": 1},
                cp(names.UNTIL, "poll[1]", 1): {"value": False},
                cp(names.SEND, "poll[2]/probe", 1): {"ok": True},
            },
            current="poll[2]/probe",
        )
    )
    rows = {
        n["id"]: n for _, n in step_tree.flatten(tree) if n["kind"] not in ("branch", "iteration")
    }
    assert rows["check"]["status"] == "failed" and rows["check"]["exit_code"] == 2
    assert rows["fix"]["output"] == "then" and rows["repair"]["status"] == "completed"
    assert rows["celebrate"]["status"] == "skipped"
    poll = rows["poll"]
    assert [it["n"] for it in poll["iterations"]] == [1, 2]
    assert poll["iterations"][1]["steps"][0]["status"] == "active"
    assert poll["status"] == "active"
    assert rows["notify"]["status"] == "pending"
    headings = [(d, n["id"]) for d, n in step_tree.flatten(tree) if n["kind"] == "iteration"]
    assert headings == [(1, "iteration 1"), (1, "iteration 2")]


def test_a_false_condition_is_skipped_with_its_reason():
    tree = step_tree.steps_tree(
        facts(
            {
                names.checkpoint(names.DECIDE, "notify", 1): {
                    "value": False,
                    "why": "`payload.loud` is false",
                },
            }
        )
    )
    notify = tree[-1]
    assert (notify["status"], notify["reason"]) == ("skipped", "`payload.loud` is false")
