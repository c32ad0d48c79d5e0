"""Counts as an invariant: every count the product shows equals counting what its list shows.

The counts are the runs page's by state (kept by migrations 026 and 037, or counted under a
filter), by workflow and by day, the Recipes page's runs of each workflow, and the charts' data
(runs over time by state, failed runs by step). The lists are the runs page's, page by page. Both
are read through the same functions the console and the CLI call, in one snapshot, after every
operation of a seeded sequence of spawns, parallel groups, foreach items, sub-workflows, cancels,
retries, reruns, runs growing old and cleanups, while the conductor and bots move the runs.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from engine_adapter.catalog.workflows import list_workflows
from engine_adapter.conductor import reruns
from engine_adapter.model.domain import RUN_STATES
from engine_adapter.model.identity import Actor
from engine_adapter.read import run_list
from engine_adapter.read.run_list import RunFilters, RunRow
from engine_adapter.runs import commands, retention
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

OPERATOR = Actor("tester", "console")
ENDED = ("completed", "failed", "cancelled")
NO_STEP = "(before any step)"  # the failures chart's name for a run failed before any step

SOLO = """
slug: solo
steps:
  - id: work
    run_command: exit {{payload.code}}
"""
FAN = """
slug: fan
steps:
  - id: before
    run_command: "true"
  - id: group
    parallel:
      a: [{id: x, run_command: "sleep {{payload.nap}}"}]
      b: [{id: y, run_command: "exit {{payload.code}}"}]
  - id: after
    run_command: "true"
"""
ITEMS = """
slug: items
steps:
  - id: each
    foreach: range(2)
    max_parallel: 2
    steps:
      - id: item
        run_command: "sleep {{payload.nap}}; exit {{payload.code}}"
  - id: after
    run_command: "true"
"""
OUTER = """
slug: outer
steps:
  - id: first
    run_command: "true"
  - id: call
    workflow: solo
    payload:
      code: "{{payload.code}}"
  - id: last
    run_command: "true"
"""
GATE = """
slug: gate
steps:
  - id: ask
    human_gate: Go on?
  - id: after
    run_command: "true"
"""
RECIPES = (SOLO, FAN, ITEMS, OUTER, GATE)


# -- what the product shows, through the functions the console and the CLI call -------------------


def listed(conn: psycopg.Connection, filters: RunFilters) -> list[RunRow]:
    """Every run the runs page lists under filters, page after page."""
    rows: list[RunRow] = []
    cursor = None
    while True:
        page = run_list.runs_page(conn, filters, cursor, limit=7)
        rows += page.rows
        if page.next_cursor is None:
            return rows
        cursor = page.next_cursor


def by_state(rows: list[RunRow]) -> dict[str, int]:
    found = Counter(r.state for r in rows)
    return {state: found.get(state, 0) for state in RUN_STATES}


def bucket_of(at: datetime, seconds: int) -> datetime:
    """As the charts bucket a moment: date_bin from 2000-01-01 UTC."""
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    return origin + timedelta(seconds=(at - origin).total_seconds() // seconds * seconds)


def chart_agrees(conn: psycopg.Connection, filters: RunFilters) -> None:
    """The charts' runs over time and failed runs by step: a count of the listed runs of the
    chart's window (the kept counts draw whole days; a shorter window counts runs)."""
    data = run_list.chart_data(conn, filters)
    since, seconds = data["window"]["since"], data["window"]["bucket_s"]
    rows = listed(conn, RunFilters(workflow=filters.workflow, since=since))
    drawn = Counter()
    for bar in data["over_time"]:
        drawn[(bar["bucket"], bar["state"])] += bar["runs"]
    assert +drawn == Counter((bucket_of(r.created_at, seconds), r.state) for r in rows), filters
    failures = {(f["workflow"], f["step"]): f["runs"] for f in data["failures"]}
    assert failures == Counter(
        (r.workflow, r.current_step or NO_STEP) for r in rows if r.state == "failed"
    ), filters


def assert_counts_agree(conn: psycopg.Connection) -> None:
    """Every count shown equals a count(*) over the list it stands for, in one snapshot."""
    with conn.transaction():
        conn.execute("set transaction isolation level repeatable read")
        everything = listed(conn, RunFilters())
        # The runs page: "all N" and each state's count, kept (no filter, or a workflow's).
        assert run_list.state_counts(conn, RunFilters()) == by_state(everything)
        for wf in list_workflows(conn):
            mine = listed(conn, RunFilters(workflow=wf["slug"]))
            assert run_list.state_counts(conn, RunFilters(workflow=wf["slug"])) == by_state(mine)
            # The Recipes page's count links to this very list.
            assert wf["runs"] == len(mine), wf["slug"]
            chart_agrees(conn, RunFilters(workflow=wf["slug"]))
        # By day: the runs page under a day's filter, and the chart's bar of that day.
        for day in {run_list.utc_day(r.created_at) for r in everything}:
            one_day = RunFilters(since=day, until=day + timedelta(days=1))
            on_day = [r for r in everything if day <= r.created_at < one_day.until]
            assert listed(conn, one_day) == on_day
            assert run_list.state_counts(conn, one_day) == by_state(on_day)
        chart_agrees(conn, RunFilters())  # the last 7 days, drawn from the kept counts by day
        now = datetime.now(UTC)
        chart_agrees(conn, RunFilters(since=now - timedelta(days=2)))  # by hour, counted
        chart_agrees(conn, RunFilters(since=now - timedelta(hours=2)))  # by 5 minutes


# -- the regression: one run with a parallel group ---------------------------------------------


def test_one_run_with_a_parallel_group_is_counted_once_everywhere(conn, apply, procs):
    """Its two branch runs are in their parent: not on the runs page, not in its counts, not in
    the Recipes page's count, not in the charts (once counted: 3 runs of a workflow with 1)."""
    apply(FAN)
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "fan", {"code": 0, "nap": 0}).run_id
    harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert [r.run_id for r in listed(conn, RunFilters())] == [run_id]
    assert run_list.state_counts(conn, RunFilters())["completed"] == 1
    assert next(w for w in list_workflows(conn) if w["slug"] == "fan")["runs"] == 1
    assert_counts_agree(conn)


def test_a_run_made_a_branch_after_it_was_written_leaves_the_counts(conn, apply):
    """A run written top-level, then made its parent's branch (as set_run_parent did): the
    update that makes it a branch takes it off the counts, in the same statement. A run moved
    to another day is counted on that day."""
    apply(GATE)
    parent = spawn(conn, "gate").run_id
    branch = spawn(conn, "gate").run_id
    assert run_list.state_counts(conn, RunFilters())["pending"] == 2
    conn.execute(
        "update threadline.run_threads set parent_run_id = %s,"
        ' trigger = trigger || \'{"what": "branch"}\' where run_id = %s',
        (parent, branch),
    )
    assert [r.run_id for r in listed(conn, RunFilters())] == [parent]
    assert run_list.state_counts(conn, RunFilters())["pending"] == 1
    conn.execute(
        "update threadline.run_threads set created_at = created_at - interval '3 days'"
        " where run_id = %s",
        (parent,),
    )
    assert_counts_agree(conn)


# -- the invariant: a generated sequence -------------------------------------------------------


class Sequence:
    """Operations drawn from one seed, each followed by the check."""

    def __init__(self, conn: psycopg.Connection, rng: random.Random) -> None:
        self.conn = conn
        self.rng = rng
        self.done: list[str] = []

    def top_level(self, states: tuple[str, ...]) -> list[RunRow]:
        return [
            r
            for r in listed(self.conn, RunFilters())
            if r.state in states and self._parent(r.run_id) is None
        ]

    def _parent(self, run_id: str) -> Any:
        row = self.conn.execute(
            "select parent_run_id from threadline.run_threads where run_id = %s", (run_id,)
        ).fetchone()
        return row["parent_run_id"]

    def spawn(self, slug: str | None = None, code: int | None = None) -> None:
        slug = slug or self.rng.choice(["solo", "fan", "items", "outer", "gate"])
        code = self.rng.choice([0, 0, 1]) if code is None else code
        payload = {"code": code, "nap": self.rng.choice([0, 0.5, 8])}
        spawn(self.conn, slug, payload)
        self.done.append(f"spawn {slug} {payload}")

    def cancel(self) -> None:
        open_runs = self.top_level(("pending", "queued", "running", "sleeping", "waiting"))
        if open_runs:
            run = self.rng.choice(open_runs)
            commands.cancel_run(self.conn, run.run_id, OPERATOR)
            self.done.append(f"cancel {run.workflow} ({run.state})")

    def retry(self) -> None:
        failed = self.top_level(("failed",))
        if failed:
            run = self.rng.choice(failed)
            commands.retry_run(self.conn, run.run_id, OPERATOR)
            self.done.append(f"retry {run.workflow}")

    def rerun(self) -> None:
        ended = self.top_level(ENDED)
        if ended:
            run = self.rng.choice(ended)
            try:
                reruns.rerun(self.conn, run.run_id, self._first_step(run.run_id), OPERATOR)
            except commands.CommandRefused:
                return
            self.done.append(f"rerun {run.workflow}")

    def _first_step(self, run_id: str) -> str:
        recipe = self.conn.execute(
            "select recipe from threadline.run_threads where run_id = %s", (run_id,)
        ).fetchone()["recipe"]
        return recipe["steps"][0]["id"]

    def grow_old(self, days_from: tuple[int, ...] = (1, 3, 200)) -> None:
        """Time passes for a finished run and its child runs: started and finished some days
        ago (a few: another bar of the chart; many: past its retention)."""
        ended = self.top_level(ENDED)
        if ended:
            run = self.rng.choice(ended)
            days = self.rng.choice(days_from)
            self.conn.execute(
                "with recursive tree as ("
                "  select run_id from threadline.run_threads where run_id = %(id)s"
                "  union all select c.run_id from threadline.run_threads c"
                "    join tree t on c.parent_run_id = t.run_id)"
                " update threadline.run_threads"
                "    set created_at = created_at - make_interval(days => %(days)s),"
                "        finished_at = finished_at - make_interval(days => %(days)s)"
                "  where run_id in (select run_id from tree)",
                dict(id=run.run_id, days=days),
            )
            self.done.append(f"{run.workflow} grows {days} days old")

    def cleanup(self) -> None:
        report = retention.cleanup(self.conn, "test")
        self.done.append(f"cleanup: {report.line() if report else 'busy'}")

    def settle(self) -> None:
        """Let the conductor and bots move the runs on a while."""
        time.sleep(self.rng.uniform(0.2, 1.5))

    def step(self) -> None:
        op = self.rng.choices(
            [
                self.spawn,
                self.settle,
                self.cancel,
                self.retry,
                self.rerun,
                self.grow_old,
                self.cleanup,
            ],
            weights=[5, 4, 2, 2, 2, 2, 1],
        )[0]
        op()
        self.check()

    def check(self) -> None:
        try:
            assert_counts_agree(self.conn)
        except AssertionError as err:
            raise AssertionError(f"after {self.done}: {err}") from err


@pytest.fixture
def workflows(apply, procs) -> Iterator[None]:
    for text in RECIPES:
        apply(text)
    procs.start("conductor")
    procs.start("bots")
    yield


@pytest.mark.parametrize("seed", [23, 2026])
def test_every_count_shown_is_a_count_of_its_list(conn, workflows, procs, seed):
    rng = random.Random(seed)
    ops = Sequence(conn, rng)
    for _ in range(3):  # a few runs first, so every operation has something to act on
        ops.spawn()
    for _ in range(24):
        ops.step()
    # Whatever the draw, every kind of operation once more, on runs that have settled (a gate
    # waits for a person; a long branch ends or was cancelled): a failed run to retry, a gate
    # to cancel among them.
    ops.spawn("fan", code=1)
    ops.spawn("gate")
    for run in ops.top_level(("pending", "queued", "running", "sleeping")):
        harness.wait_for_state(procs.url, run.run_id, (*ENDED, "waiting"), timeout=90)
    for op in (
        ops.retry,
        ops.rerun,
        ops.cancel,
        lambda: ops.grow_old((3,)),
        lambda: ops.grow_old((200,)),
        ops.cleanup,
    ):
        op()
        ops.check()
    kinds = {entry.split()[0] for entry in ops.done} | {"grows" for e in ops.done if "grows" in e}
    assert {"spawn", "retry", "rerun", "cancel", "grows", "cleanup:"} <= kinds, ops.done
    assert "cleanup removed 0 run(s)" not in ops.done[-1], ops.done  # the old run went
