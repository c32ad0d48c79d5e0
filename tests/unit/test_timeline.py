"""The waterfall's rows, from a step tree read back from checkpoints and bot attempts (no
database): a row per attempt, groups spanning their rows, open rows for what still goes on; and
its HTML, where an open bar ends at the database's now."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from console.waterfall import span_text, tick_step, waterfall_html
from engine_adapter.model import names
from engine_adapter.read import step_tree, timeline
from engine_adapter.recipes.recipes import load_recipe_text

RECIPE = """
slug: t
steps:
  - id: build
    run_command: make
    retries: 2
  - id: fan
    parallel:
      left:
        - id: lint
          run_command: ruff check
      right:
        - id: unit
          run_command: pytest
  - id: nap
    sleep: 1m
  - id: ask
    human_gate: "Ship it?"
"""
T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
RUN, LEFT, RIGHT = "run-1", "run-left", "run-right"
cp = names.checkpoint


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def claim(run_id: str, path: str, attempt: int, start: float, end: float | None, outcome: str):
    return {
        "step_key": names.step_key(run_id, path, 1),
        "attempt": attempt,
        "started_at": at(start),
        "finished_at": None if end is None else at(end),
        "outcome": outcome if end is not None else None,
    }


def facts(
    run_id: str,
    steps: list[dict[str, Any]],
    checkpoints: dict[str, tuple[float, Any]],
    claims: list[dict[str, Any]],
    state: str = "running",
    current: str | None = None,
    children: dict[str, step_tree.RunFacts] | None = None,
    await_kind: str = "bot",
) -> step_tree.RunFacts:
    return step_tree.RunFacts(
        run={
            "run_id": run_id,
            "recipe": {"steps": steps},
            "current_step": current,
            "await_kind": await_kind,
        },
        state=state,
        checkpoints={k: v for k, (_, v) in checkpoints.items()},
        written_at={k: at(t) for k, (t, _) in checkpoints.items()},
        claims=claims,
        child=lambda rid: (children or {}).get(rid),
    )


def run_at_the_gate() -> list[dict[str, Any]]:
    """build failed once then passed, both branches done, the nap over, the gate open."""
    steps = load_recipe_text(RECIPE).to_dict()["steps"]
    branches = dict(step_tree.branches_of(steps[1]))
    left = facts(
        LEFT,
        branches["left"],
        {
            cp(names.SEND, "lint", 1): (11, {}),
            cp(names.DONE, "lint", 1): (14, {"status": "completed"}),
        },
        [claim(LEFT, "lint", 1, 11.5, 13.5, "completed")],
        state="completed",
    )
    right = facts(
        RIGHT,
        branches["right"],
        {
            cp(names.SEND, "unit", 1): (11, {}),
            cp(names.DONE, "unit", 1): (19.2, {"status": "completed"}),
        },
        [claim(RIGHT, "unit", 1, 12, 19, "completed")],
        state="completed",
    )
    checkpoints = {
        cp(names.SEND, "build", 1): (1, {}),
        cp(names.DONE, "build", 1): (9, {"status": "completed", "output": "ok"}),
        cp(names.SPAWN, "fan", 1, "left"): (10, {"run_id": LEFT}),
        cp(names.SPAWN, "fan", 1, "right"): (10.5, {"run_id": RIGHT}),
        cp(names.DONE, "fan", 1, "left"): (14, {"status": "completed"}),
        cp(names.DONE, "fan", 1, "right"): (19.5, {"status": "completed"}),
        cp(names.DONE, "fan", 1): (20, {"status": "completed"}),
        cp(names.SEND, "nap", 1): (21, {"wake_at": at(81).isoformat()}),
        cp(names.SLEEP, "nap", 1): (21, {}),
        cp(names.SEND, "ask", 1): (82, {}),
    }
    claims = [
        claim(RUN, "build", 1, 2, 3, "failed"),
        claim(RUN, "build", 2, 5, 8, "completed"),
    ]
    run = facts(
        RUN,
        steps,
        checkpoints,
        claims,
        state="waiting",
        current="ask",
        children={LEFT: left, RIGHT: right},
        await_kind="gate",
    )
    return step_tree.steps_tree(run)


def test_a_row_per_attempt_groups_per_child_run_and_an_open_gate():
    rows, more = timeline.rows(run_at_the_gate())
    assert more == 0
    assert [(r.depth, r.label, r.status, r.open) for r in rows] == [
        (0, "build · attempt 1", "failed", False),
        (0, "build · attempt 2", "completed", False),
        (0, "fan", "completed", False),
        (1, "branch left", "completed", False),
        (2, "lint", "completed", False),
        (1, "branch right", "completed", False),
        (2, "unit", "completed", False),
        (0, "nap", "completed", False),
        (0, "ask", "gate", True),
    ]
    by = {r.label: r for r in rows}
    # Each attempt its own bar: the wait between them is neither's.
    assert (by["build · attempt 1"].started_at, by["build · attempt 1"].finished_at) == (
        at(2),
        at(3),
    )
    assert (by["build · attempt 2"].started_at, by["build · attempt 2"].finished_at) == (
        at(5),
        at(8),
    )
    # A child run's row spans its steps and links to its page.
    assert (by["branch right"].started_at, by["branch right"].finished_at) == (at(12), at(19))
    assert by["branch left"].run_id == LEFT
    assert (by["nap"].started_at, by["nap"].finished_at) == (at(21), at(81))  # to its wake time
    assert (by["ask"].started_at, by["ask"].finished_at) == (at(82), None)


def test_a_running_attempt_is_an_open_row_and_what_never_started_has_none():
    steps = load_recipe_text(RECIPE).to_dict()["steps"]
    run = facts(
        RUN,
        steps,
        {cp(names.SEND, "build", 1): (1, {})},
        [claim(RUN, "build", 1, 2, None, "")],
        current="build",
    )
    rows, _ = timeline.rows(step_tree.steps_tree(run))
    assert [(r.label, r.status, r.open, r.finished_at) for r in rows] == [
        ("build", "running", True, None)
    ]


def test_rows_past_the_bound_are_counted_not_drawn():
    rows, more = timeline.rows(run_at_the_gate(), max_rows=4)
    assert len(rows) == 4 and more == 5


def bar(html_text: str, key_part: str) -> dict[str, str]:
    row = re.search(
        rf'data-key="[^"]*{re.escape(key_part)}[^"]*"[^>]*>(.*?)</div></div>', html_text
    )
    assert row, key_part
    found = re.search(
        r'class="(tl-wf-bar[^"]*)" data-seconds="([\d.]+)".*?left:([\d.]+)%;width:([\d.]+)%',
        row.group(1),
    )
    assert found, row.group(1)
    return dict(
        css=found.group(1), seconds=found.group(2), left=found.group(3), width=found.group(4)
    )


def test_an_open_bar_grows_to_the_database_now_and_a_closed_one_keeps_its_length():
    rows, _ = timeline.rows(run_at_the_gate())
    early = waterfall_html(rows, T0, None, now=at(90))
    later = waterfall_html(rows, T0, None, now=at(120))
    assert bar(early, "ask")["seconds"] == "8.000" and "tl-wf-open" in bar(early, "ask")["css"]
    assert bar(later, "ask")["seconds"] == "38.000"
    assert float(bar(later, "ask")["width"]) > float(bar(early, "ask")["width"])
    assert bar(early, "build:1.2")["seconds"] == bar(later, "build:1.2")["seconds"] == "3.000"
    # Placed on the run's own axis: attempt 2 starts 5 s into a 90 s run.
    assert bar(early, "build:1.2")["left"] == f"{5 / 90 * 100:.3f}"


def test_the_axis_ticks_are_few_and_round():
    assert tick_step(90) == 15
    assert tick_step(0.3) == 0.05
    assert tick_step(4 * 3600) == 3600
    assert [span_text(s) for s in (0.25, 4, 120, 5400)] == [
        "+250 ms",
        "+4 s",
        "+2 min",
        "+1 h 30 min",
    ]
    assert "No step has started yet" in waterfall_html([], T0, None, T0)
