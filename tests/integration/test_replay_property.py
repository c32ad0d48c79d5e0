"""A rerun is faithful to its original: the steps it carries over hand later steps exactly the
values they handed them in the original run (conditions, placeholders, named and declared
outputs), so a rerun with the same payload decides and computes what the original did."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_adapter.conductor.reruns import rerun
from engine_adapter.model.identity import Actor
from engine_adapter.read import step_tree
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

OPERATOR = Actor("tester", "console")


def handed_on(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any]:
    """What a finished run hands on: each step's view as later steps read it, its named outputs,
    its declared outputs and its last output."""
    row = conn.execute(
        "select outputs from threadline.run_threads where run_id = %s", (run_id,)
    ).fetchone()
    return row["outputs"]


def undeclared(nodes: list[dict[str, Any]]) -> set[str]:
    """Keys of the step tree's nodes, nested ones included, that its typed record does not name."""
    found: set[str] = set()
    for node in nodes:
        found |= set(node) - set(step_tree.StepNode.__annotations__)
        for nested in (*(node.get("blocks") or []), *(node.get("iterations") or [])):
            found |= undeclared(nested["steps"])
        for branch in node.get("branches") or []:
            found |= undeclared(branch.get("steps") or [])
    return found


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


# -- the property ---------------------------------------------------------------------------------
# Generated recipes: command steps (each names its output), conditions over earlier steps' outputs
# and the payload, if/then/else, parallel groups (all, and any whose slow branch never wins: a
# loser is cancelled, so its sleep costs nothing), foreach (in the run and as child runs), repeat,
# a sub-workflow, and declared outputs over every step.
CHILD = """
slug: replay-child
outputs:
  said: steps.hello.output
steps:
  - id: hello
    run_command: echo "child {{payload.w}}"
"""
PAYLOAD = {"w": "x", "flag": True, "items": ["p", "q"]}
CHANGED = {"w": "y", "flag": False, "items": ["p", "q", "r"]}
KINDS = ("command", "command", "choice", "all", "any", "foreach", "repeat", "sub")
_slugs = itertools.count(1)


def _command(draw: st.DrawFn, sid: str, earlier: list[str]) -> dict[str, Any]:
    """A command whose output later conditions can match: "<w>-<id>" (with a final newline, or
    two), or an earlier step's output passed on."""
    text = draw(
        st.sampled_from(
            [
                f'echo "{{{{payload.w}}}}-{sid}"',
                f"printf '%s\\n\\n' \"{{{{payload.w}}}}-{sid}\"",
                *[f'echo "{{{{steps.{e}.output}}}}"' for e in earlier],
                *[f'echo "{{{{outputs.n_{e}}}}}-{sid}"' for e in earlier],
            ]
        )
    )
    return {"id": sid, "run_command": text}


def _condition(draw: st.DrawFn, earlier: list[str]) -> str:
    atoms = ["payload.flag", "not payload.flag"]
    for e in earlier:
        for w in ("x", "y"):
            atoms += [f'steps.{e}.output == "{w}-{e}"', f'outputs.n_{e} == "{w}-{e}"']
        atoms += [f"steps.{e}.skipped", f'steps.{e}.status == "completed"']
    parts = draw(st.lists(st.sampled_from(atoms), min_size=1, max_size=2))
    return f" {draw(st.sampled_from(['and', 'or']))} ".join(parts)


@st.composite
def replay_recipes(draw: st.DrawFn) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    earlier: list[str] = []  # top-level commands: always finished (run or skipped), named n_<id>
    for i in range(draw(st.integers(min_value=2, max_value=4))):
        sid, kind = f"s{i}", draw(st.sampled_from(KINDS))
        guard = draw(st.booleans())
        if kind == "command":
            step = {**_command(draw, sid, earlier), "output": f"n_{sid}"}
        elif kind == "choice":
            step = {
                "id": sid,
                "if": _condition(draw, earlier),
                "then": [_command(draw, f"{sid}t", earlier)],
                "else": [_command(draw, f"{sid}e", earlier)],
            }
            guard = False
        elif kind in ("all", "any"):
            inner = _command(draw, f"{sid}a", earlier)
            if earlier and draw(st.booleans()):
                inner["if"] = _condition(draw, earlier)
            slow = {"id": f"{sid}b", "run_command": f'sleep 30; echo "{sid} late"'}
            if kind == "all":
                slow = _command(draw, f"{sid}b", earlier)
            step = {"id": sid, "parallel": {"a": [inner], "b": [slow]}}
            if kind == "any":
                step["completion"] = "any"
        elif kind == "foreach":
            step = {
                "id": sid,
                "foreach": "payload.items",
                "max_parallel": draw(st.sampled_from([1, 2])),
                "steps": [{"id": f"{sid}i", "run_command": 'echo "{{item}}-{{payload.w}}"'}],
            }
        elif kind == "repeat":
            step = {
                "id": sid,
                "repeat": [_command(draw, f"{sid}r", earlier)],
                "until": "iteration >= 2",
                "max_iterations": 3,
            }
        else:
            step = {"id": sid, "workflow": "replay-child", "payload": {"w": "{{payload.w}}"}}
        if guard and earlier:
            step["if"] = _condition(draw, earlier)
        steps.append(step)
        if kind == "command":
            earlier.append(sid)
    outputs = {f"o_{s['id']}": f"steps.{s['id']}.output" for s in steps}
    outputs.update({f"n_{e}": f"outputs.n_{e}" for e in earlier})
    return {"outputs": outputs, "steps": steps}


def nested_ids(step: dict[str, Any]) -> list[str]:
    """A step's id and every id nested in it."""
    ids = [step["id"]]
    for key in ("then", "else", "steps", "repeat"):
        for inner in step.get(key) or []:
            ids += nested_ids(inner)
    for branch in (step.get("parallel") or {}).values():
        for inner in branch:
            ids += nested_ids(inner)
    return ids


STOPPED = "stopped with its branch"


def drawn(nodes: list[dict[str, Any]]) -> list[tuple[int, str, str, str]]:
    """Each step, branch and iteration as drawn (child runs' steps too): what ran, was skipped or
    taken, in order. A step of a cancelled branch (an `any` group's loser) is drawn cancelled
    when its run had sent it before the winner ended the branch, skipped when not: timing
    alone, which no rerun can repeat, so both read as stopped with the branch."""
    found: list[tuple[int, str, str, str]] = []
    stopped_at: int | None = None  # the depth of the cancelled branch we are in
    for depth, n in step_tree.flatten(nodes):
        if stopped_at is not None and depth <= stopped_at:
            stopped_at = None
        status = n["status"]
        if stopped_at is not None and status in ("cancelled", "skipped"):
            status = STOPPED
        found.append((depth, n["id"], n["kind"], status))
        if stopped_at is None and n["kind"] == "branch" and n["status"] == "cancelled":
            stopped_at = depth
    return found


def finished(url: str, run_id: str) -> dict[str, Any]:
    return harness.wait_for_state(url, run_id, "completed", timeout=120)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(recipe=replay_recipes())
def test_a_rerun_from_any_step_decides_and_computes_as_its_original(conn, apply, procs, recipe):
    """Rerun from every top-level step with the same payload: the rerun hands on exactly what
    the original did (every step's status, skip, branch and output, named and declared
    outputs), and the steps after the rerun point decide as the original did. With a changed
    payload, what the carried steps hand on is still the original's. A rerun of a rerun too."""
    if not procs.procs:
        apply(CHILD)
        procs.start("conductor")
    # A bots process per example: the examples share nothing but the conductor and the database.
    bots = procs.start("bots", args=["--concurrency", "8"])
    try:
        _replays_faithfully(conn, procs, apply, recipe)
    finally:
        harness.kill(bots)


def _replays_faithfully(
    conn: psycopg.Connection[Any],
    procs: harness.ProcessSet,
    apply: Callable[[str], str],
    recipe: dict[str, Any],
) -> None:
    slug = f"replay-{next(_slugs)}"
    apply(yaml.safe_dump({"slug": slug, **recipe}, sort_keys=False))
    first = spawn(conn, slug, PAYLOAD).run_id
    tree, base = finished(procs.url, first), handed_on(conn, first)
    assert undeclared(tree["steps"]) == set()  # the read model's StepNode says every field
    top = [s["id"] for s in recipe["steps"]]
    same = {sid: rerun(conn, first, sid, OPERATOR).run_id for sid in top}
    changed = {sid: rerun(conn, first, sid, OPERATOR, CHANGED).run_id for sid in top[1:]}

    for k, sid in enumerate(top):
        view = finished(procs.url, same[sid])
        assert handed_on(conn, same[sid]) == base, f"rerun from {sid}"
        assert [n["status"] for n in view["steps"][:k]] == ["carried_over"] * k
        assert drawn(view["steps"][k:]) == drawn(tree["steps"][k:]), f"rerun from {sid}"

    for k, sid in enumerate(top[1:], start=1):
        finished(procs.url, changed[sid])
        got = handed_on(conn, changed[sid])
        carried = {i for s in recipe["steps"][:k] for i in nested_ids(s)}
        assert {i: v for i, v in got["steps"].items() if i in carried} == {
            i: v for i, v in base["steps"].items() if i in carried
        }, f"rerun from {sid} with another payload"
        named = {f"n_{i}" for i in carried}
        assert {n: v for n, v in got["outputs"].items() if n in named} == {
            n: v for n, v in base["outputs"].items() if n in named
        }

    # A rerun of a rerun replays the carried steps of the rerun: still the original's values.
    again = rerun(conn, same[top[-1]], top[-1], OPERATOR).run_id
    finished(procs.url, again)
    assert handed_on(conn, again) == base


RETRIED = """
slug: replay-retried
steps:
  - id: flaky
    run_command: test -e {{payload.dir}}/again || { touch {{payload.dir}}/again; exit 1; }; echo ok
  - id: after
    run_command: echo after
"""


def test_a_rerun_whose_original_lost_a_record_is_refused_saying_which_step(
    conn, apply, procs, tmp_path
):
    """What a carried step handed on is read back from its run's journal; a journal missing a
    record it needs (here the retry of flaky's first try) refuses the rerun in one line, and
    nothing is written."""
    from engine_adapter.runs import commands

    apply(RETRIED)
    procs.start("conductor")
    procs.start("bots")
    first = spawn(conn, "replay-retried", {"dir": str(tmp_path)}).run_id
    harness.wait_for_state(procs.url, first, "failed", timeout=60)
    commands.retry_run(conn, first, OPERATOR)
    harness.wait_for_state(procs.url, first, "completed", timeout=60)
    conn.execute(
        "delete from threadline.run_journal where run_id = %s and name = 'retry:flaky:1'",
        (first,),
    )
    conn.commit()
    runs = conn.execute("select count(*) as n from threadline.run_threads").fetchone()["n"]
    with pytest.raises(commands.CommandRefused) as refused:
        rerun(conn, first, "after", OPERATOR)
    assert str(refused.value) == (
        f"run {first} no longer holds all that step flaky handed on: rerun from step flaky or "
        "earlier"
    )
    conn.rollback()
    assert conn.execute("select count(*) as n from threadline.run_threads").fetchone()["n"] == runs
