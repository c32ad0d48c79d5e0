"""Retention: finished runs past their time leave Threadline and the engine together; runs in
flight are never touched; output goes sooner; the conductor runs the job itself."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from engine_adapter.model.identity import Actor
from engine_adapter.recipes.recipes import RecipeError, load_recipe_text
from engine_adapter.runs import retention
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

cli = harness.run_cli
ONE_STEP = """
slug: {slug}
{extra}
steps:
  - id: work
    run_command: |
      f={{{{payload.dir}}}}/{slug}-tries; echo x >> $f
      [ "$(wc -l < $f)" -gt 1 ] || exit 3
    retries: 1
    backoff: {{initial: 1s, max: 1s}}
"""
GATED = """
slug: gated
steps:
  - id: ok
    human_gate: "Go?"
"""
PARALLEL = """
slug: fan
steps:
  - id: group
    parallel:
      a: [{id: x, run_command: "true"}]
      b: [{id: y, run_command: "true"}]
"""


def age(conn: psycopg.Connection, run_id: str, days: int) -> None:
    """Make a run (and its child runs) look finished `days` ago."""
    conn.execute(
        "update threadline.run_threads set finished_at = now() - make_interval(days => %s)"
        " where run_id = %s or parent_run_id = %s",
        (days, run_id, run_id),
    )


def rows_of(conn: psycopg.Connection, run_id: str) -> dict[str, int]:
    """How many rows of the run each table holds, Threadline's and the engine's."""
    counts: dict[str, int] = {}
    for table, column in (
        ("threadline.run_threads", "run_id"),
        ("threadline.thread_entries", "run_id"),
        ("threadline.step_claims", "run_id"),
        ("threadline.run_journal", "run_id"),
        ("absurd.t_threadline", "task_id"),
        ("absurd.r_threadline", "task_id"),
        ("absurd.c_threadline", "task_id"),
    ):
        counts[table] = conn.execute(
            f"select count(*) as n from {table} where {column} = %s", (run_id,)
        ).fetchone()["n"]
    return counts


def progress_entries(conn: psycopg.Connection, run_id: str) -> int:
    return conn.execute(
        "select count(*) as n from threadline.thread_entries"
        " where run_id = %s and author_kind = 'bot' and kind = 'progress'",
        (run_id,),
    ).fetchone()["n"]


@pytest.fixture
def finished(conn, apply, procs, db_url, tmp_path):
    """Runs of two workflows, finished: `short` keeps runs 2 days, `plain` the default."""
    apply(ONE_STEP.format(slug="short", extra="retention: {runs: 2d, output: 1d}"))
    apply(ONE_STEP.format(slug="plain", extra=""))
    procs.start("conductor")
    procs.start("bots")
    runs = {slug: spawn(conn, slug, {"dir": str(tmp_path)}).run_id for slug in ("short", "plain")}
    for run_id in runs.values():
        harness.wait_for_state(db_url, run_id, "completed", timeout=60)
    procs.kill_all()
    return runs


def test_a_run_past_its_retention_leaves_threadline_and_the_engine_together(
    conn, apply, finished, db_url
):
    console = db_url  # `threadline cleanup` connects as the owner, as every CLI command does
    apply(GATED)
    in_flight = spawn(conn, "gated").run_id
    conn.execute(  # started long ago, still waiting: never touched
        "update threadline.run_threads set created_at = now() - interval '400 days'"
        " where run_id = %s",
        (in_flight,),
    )
    age(conn, finished["short"], 3)  # past its workflow's 2 days
    age(conn, finished["plain"], 3)  # within the default 180 days
    kept_before = rows_of(conn, finished["plain"])
    assert all(kept_before.values())
    assert all(rows_of(conn, finished["short"]).values())

    dry = cli(console, "cleanup", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert '"runs": 1' in dry.stdout
    assert all(rows_of(conn, finished["short"]).values())  # a dry run removes nothing

    out = cli(console, "cleanup")
    assert out.returncode == 0 and "removed 1 run(s)" in out.stdout, out
    assert set(rows_of(conn, finished["short"]).values()) == {0}
    assert rows_of(conn, finished["plain"]) == kept_before
    assert rows_of(conn, in_flight)["threadline.run_threads"] == 1
    assert "removed 1 run(s)" in retention.describe_last(retention.last(conn))

    again = cli(console, "cleanup")
    assert "removed 0 run(s)" in again.stdout


def test_output_goes_after_its_own_retention_and_the_run_stays(conn, finished, db_url):
    run_id = finished["plain"]
    assert progress_entries(conn, run_id) >= 2  # attempt 1 failed / attempt 2 starting
    age(conn, run_id, 40)  # past the default output retention (30 days), within 180
    out = cli(db_url, "cleanup")
    assert out.returncode == 0, out.stderr
    assert progress_entries(conn, run_id) == 0
    shown = harness.run_cli(db_url, "show", run_id, "--json")
    assert '"status": "completed"' in shown.stdout


def test_child_runs_go_with_their_parent_and_the_conductor_cleans_up_at_start(
    conn, apply, procs, db_url
):
    apply(PARALLEL)
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "fan").run_id
    harness.wait_for_state(db_url, run_id, "completed", timeout=60)
    procs.kill_all()
    children = [
        str(r["run_id"])
        for r in conn.execute(
            "select run_id from threadline.run_threads where parent_run_id = %s", (run_id,)
        ).fetchall()
    ]
    assert len(children) == 2
    age(conn, run_id, 200)
    procs.start("conductor")  # its first tick runs the cleanup
    harness.wait_for(
        lambda: rows_of(conn, run_id)["threadline.run_threads"] == 0,
        what="the conductor's cleanup to remove the aged run",
        timeout=30,
    )
    for child in children:
        assert set(rows_of(conn, child).values()) == {0}
    assert "removed 1 run(s)" in cli(db_url, "retention").stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("set", "runs", "10m"), 'retention runs: "10m" must be at least 1h'),
        (("set", "output", "200d"), "output (200d) must not be longer than runs (180d)"),
        (("set", "runs", "soon"), 'retention runs: "soon" is not a duration'),
        (("set", "size", "1d"), "invalid choice: 'size'"),
    ],
)
def test_bad_retention_settings_are_refused_and_change_nothing(
    conn, db_url, args: tuple[str, ...], message: str
):
    before = retention.defaults(conn)
    out = cli(db_url, "retention", *args)
    assert out.returncode != 0 and message in out.stderr, out
    assert retention.defaults(conn) == before


@pytest.mark.parametrize(
    "value, message",
    [
        ("{runs: 30m}", 'retention.runs: "30m" must be at least 1h'),
        ("{runs: 2d, output: 3d}", "retention.output: must not be longer than retention.runs"),
        ("{keep: 2d}", "retention: "),
        ("{output: never}", 'retention.output: "never" is not a duration'),
    ],
)
def test_a_recipes_bad_retention_names_its_path(value: str, message: str):
    with pytest.raises(RecipeError) as refused:
        load_recipe_text(ONE_STEP.format(slug="bad", extra=f"retention: {value}"))
    assert message in str(refused.value)


def test_setting_the_defaults_applies_to_workflows_without_their_own(conn):
    retention.set_default(conn, "output", "7d", Actor("admin", "cli"))
    current: dict[str, Any] = retention.defaults(conn)
    assert (current["runs"], current["output"], current["set_by"]) == ("180d", "7d", "admin")


SCHEDULED = """
slug: {slug}
schedule: "0 3 * * *"
{extra}
steps:
  - id: s
    run_command: "true"
"""


def slots_of(conn: psycopg.Connection, slug: str) -> list[Any]:
    return [
        r["slot"]
        for r in conn.execute(
            "select slot from threadline.schedule_ticks where workflow = %s order by slot",
            (slug,),
        ).fetchall()
    ]


def test_schedule_slots_past_the_run_retention_go_and_the_latest_stays(conn, apply, db_url):
    """A workflow on a schedule gains a slot row per fire: they go with the run retention, but
    each workflow keeps its latest, which its schedule resumes from."""
    apply(SCHEDULED.format(slug="nightly", extra="retention: {runs: 2d}"))
    apply(SCHEDULED.format(slug="keeper", extra=""))  # the default, 180 days
    conn.execute(
        "insert into threadline.schedule_ticks (workflow, slot)"
        " select w, now() - make_interval(days => d, hours => 1)"
        " from unnest(array['nightly', 'keeper']) w, generate_series(1, 400) d"
    )
    latest = {slug: slots_of(conn, slug)[-1] for slug in ("nightly", "keeper")}
    console = db_url

    dry = cli(console, "cleanup", "--dry-run", "--json")
    assert dry.returncode == 0 and '"ticks": 620' in dry.stdout, dry  # 399 + 221
    assert len(slots_of(conn, "nightly")) == 400

    out = cli(console, "cleanup")
    assert out.returncode == 0 and "620 schedule slot(s)" in out.stdout, out
    assert slots_of(conn, "nightly") == [latest["nightly"]]  # 1 day old: within 2 days
    kept = slots_of(conn, "keeper")
    assert len(kept) == 179 and kept[-1] == latest["keeper"]
    assert "620 schedule slot(s)" in retention.describe_last(retention.last(conn))

    # The latest slot stays however old it is; an older one past the retention goes.
    conn.execute(
        "update threadline.schedule_ticks set slot = slot - interval '30 days'"
        " where workflow = 'nightly'"
    )
    conn.execute(
        "insert into threadline.schedule_ticks (workflow, slot)"
        " values ('nightly', now() - interval '40 days')"
    )
    again = cli(console, "cleanup")
    assert "1 schedule slot(s)" in again.stdout, again
    assert slots_of(conn, "nightly") == [latest["nightly"] - timedelta(days=30)]
