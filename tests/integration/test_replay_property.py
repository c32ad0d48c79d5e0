"""A rerun is faithful to its original: the steps it carries over hand later steps exactly the
values they handed them in the original run (conditions, placeholders, named and declared
outputs), so a rerun with the same payload decides and computes what the original did."""

from __future__ import annotations

from typing import Any

import psycopg

from engine_adapter import harness, step_tree
from engine_adapter.identity import Actor
from engine_adapter.reruns import rerun
from engine_adapter.spawn import spawn

OPERATOR = Actor("tester", "console")


def handed_on(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any]:
    """What a finished run hands on: each step's view as later steps read it, its named outputs,
    its declared outputs and its last output."""
    row = conn.execute(
        "select outputs from threadline.run_threads where run_id = %s", (run_id,)
    ).fetchone()
    return row["outputs"]


def statuses(view: dict[str, Any]) -> dict[str, str]:
    return {
        n["id"]: n["status"]
        for _, n in step_tree.flatten(view["steps"])
        if n["kind"] not in ("branch", "iteration")
    }


# `echo go` outputs "go\n": every later reader sees "go", in the run and in any rerun of it.
NEWLINE = """
slug: replay-newline
outputs:
  said: steps.first.output
  word: outputs.word
  quiet: steps.quiet.output
steps:
  - id: first
    run_command: echo go
    output: word
  - id: quiet
    if: payload.loud
    run_command: echo loud
  - id: second
    if: steps.first.output == "go" and outputs.word == "go" and steps.quiet.output == ""
    run_command: echo "second saw {{steps.first.output}}/{{outputs.word}}"
"""


def test_a_rerun_hands_carried_steps_on_as_the_original_did(conn, apply, procs):
    apply(NEWLINE)
    procs.start("conductor")
    procs.start("bots")
    first = spawn(conn, "replay-newline", {"loud": False}).run_id
    original = harness.wait_for_state(procs.url, first, "completed", timeout=60)
    assert statuses(original)["second"] == "completed"

    again = rerun(conn, first, "second", OPERATOR).run_id
    view = harness.wait_for_state(procs.url, again, "completed", timeout=60)
    assert statuses(view) == {
        "first": "carried_over",
        "quiet": "carried_over",
        "second": "completed",
    }
    assert handed_on(conn, again) == handed_on(conn, first)
    assert view["outputs"] == {"said": "go", "word": "go", "quiet": ""}
