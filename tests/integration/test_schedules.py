"""Schedules on the real database: an injected clock walked through many slots, catch-up, both
daylight-saving transitions, tickers racing on separate connections, disabling, the CLI, and once
on the real clock with conductor processes doing the ticking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from engine_adapter.catalog.workflows import set_enabled
from engine_adapter.runs import schedules
from engine_adapter.store import db
from engine_adapter.testing import harness


def recipe(
    slug: str,
    schedule: str | None,
    tz: str = "UTC",
    catch_up: str | None = None,
    step: str = "sleep: 1s",
) -> str:
    text = f"slug: {slug}\nsteps:\n  - id: a\n    {step}\n"
    if schedule:
        text += f'schedule: "{schedule}"\ntimezone: {tz}\n'
    if catch_up:
        text += f"catch_up: {catch_up}\n"
    return text


def enable_at(conn: psycopg.Connection, slug: str, at: datetime) -> None:
    """As if the schedule had been enabled at `at` (the database stamps the real time on apply)."""
    conn.execute(
        "update threadline.workflows set schedule_enabled_at = %s where slug = %s", (at, slug)
    )


def runs(conn: psycopg.Connection, slug: str) -> list[dict[str, Any]]:
    return conn.execute(
        "select run_id, trigger from threadline.run_threads where workflow = %s "
        "order by trigger ->> 'slot'",
        (slug,),
    ).fetchall()


def ticks(conn: psycopg.Connection, slug: str) -> list[dict[str, Any]]:
    return conn.execute(
        "select slot, run_id, skipped from threadline.schedule_ticks where workflow = %s "
        "order by slot",
        (slug,),
    ).fetchall()


def thread_texts(conn: psycopg.Connection, run_id: Any) -> list[str]:
    return [
        r["text"]
        for r in conn.execute(
            "select text from threadline.thread_entries where run_id = %s order by seq", (run_id,)
        )
    ]


def walk(
    conn: psycopg.Connection, start: datetime, end: datetime, step: timedelta
) -> list[schedules.Fired]:
    fired, t = [], start
    while t <= end:
        fired += schedules.tick(conn, t)
        t += step
    return fired


T0 = datetime(2026, 11, 23, 6, 59, 30, tzinfo=UTC)


def test_walking_the_clock_fires_each_slot_once(conn, apply):
    apply(recipe("every5", "*/5 * * * *"))
    enable_at(conn, "every5", T0)
    # Three ticks a minute for an hour: 12 slots, each fired once, whatever the tick rate.
    fired = walk(conn, T0, T0 + timedelta(hours=1), timedelta(seconds=20))
    expected = [
        datetime(2026, 11, 23, 7, 0, tzinfo=UTC) + timedelta(minutes=5 * i) for i in range(12)
    ]
    assert [f.slot for f in fired] == expected
    assert all(f.run_id and f.skipped == 0 for f in fired)
    rows = ticks(conn, "every5")
    assert [r["slot"] for r in rows] == expected
    assert [str(r["run_id"]) for r in rows] == [f.run_id for f in fired]
    got = runs(conn, "every5")
    assert len(got) == 12
    first = got[0]["trigger"]
    assert first["kind"] == "schedule" and first["slot"] == expected[0].isoformat()
    assert first["slot_local"] == "2026-11-23 07:00 UTC" and first["caller"] == "schedule"
    assert thread_texts(conn, got[0]["run_id"])[0].startswith(
        "Run of every5 v1 started by schedule, slot 2026-11-23 07:00 UTC."
    )
    assert schedules.tick(conn, T0 + timedelta(hours=1)) == []  # the same clock again: nothing


def test_catch_up_latest_runs_once_for_the_latest_slot_and_notes_the_skipped(conn, apply):
    apply(recipe("hourly", "0 * * * *", tz="Europe/Berlin"))
    enable_at(conn, "hourly", T0)  # 07:59:30 in Berlin
    [fired] = schedules.tick(
        conn, T0 + timedelta(hours=2, minutes=10)
    )  # down over 08:00, 09:00, 10:00
    assert fired.slot == datetime(2026, 11, 23, 9, 0, tzinfo=UTC) and fired.skipped == 2
    texts = thread_texts(conn, fired.run_id)
    assert "(catching up; 2 earlier slots skipped)" in texts[0]
    assert texts[1] == (
        "Catch-up after missed slots: this run stands for the latest, 2026-11-23 10:00 "
        "Europe/Berlin; skipped 2 earlier slots: 2026-11-23 08:00 Europe/Berlin, "
        "2026-11-23 09:00 Europe/Berlin."
    )
    # Back on time: the next slot fires alone, with no note.
    [nxt] = schedules.tick(conn, datetime(2026, 11, 23, 10, 0, 1, tzinfo=UTC))
    assert nxt.skipped == 0 and len(thread_texts(conn, nxt.run_id)) == 1
    assert [r["skipped"] for r in ticks(conn, "hourly")] == [2, 0]


def test_catch_up_all_and_none(conn, apply):
    apply(recipe("all-of-them", "0 * * * *", catch_up="all"))
    apply(recipe("none-of-them", "0 * * * *", catch_up="none"))
    for slug in ("all-of-them", "none-of-them"):
        enable_at(conn, slug, T0)
    fired = schedules.tick(
        conn, T0 + timedelta(hours=2, minutes=10)
    )  # down over 07:00, 08:00, 09:00
    by = {
        slug: [f for f in fired if f.workflow == slug] for slug in ("all-of-them", "none-of-them")
    }
    assert [(f.slot.hour, bool(f.run_id)) for f in by["all-of-them"]] == [
        (7, True),
        (8, True),
        (9, True),
    ]
    # none: the missed slots are handled as skipped (one slot row without a run), nothing runs.
    assert [(f.slot.hour, f.run_id, f.skipped) for f in by["none-of-them"]] == [(9, None, 3)]
    assert runs(conn, "none-of-them") == [] and len(runs(conn, "all-of-them")) == 3
    assert [(r["slot"].hour, r["run_id"], r["skipped"]) for r in ticks(conn, "none-of-them")] == [
        (9, None, 2)
    ]
    # A slot that is on time runs under every policy.
    fired = schedules.tick(conn, datetime(2026, 11, 23, 10, 0, 5, tzinfo=UTC))
    assert sorted((f.workflow, f.slot.hour, bool(f.run_id)) for f in fired) == [
        ("all-of-them", 10, True),
        ("none-of-them", 10, True),
    ]
    assert len(runs(conn, "none-of-them")) == 1 and len(runs(conn, "all-of-them")) == 4


def test_spring_forward_skips_the_missing_local_time(conn, apply):
    apply(recipe("ny-spring", "30 2 * * *", tz="America/New_York"))
    enable_at(conn, "ny-spring", datetime(2026, 3, 6, 12, tzinfo=UTC))
    fired = walk(
        conn,
        datetime(2026, 3, 6, 12, tzinfo=UTC),
        datetime(2026, 3, 10, 12, tzinfo=UTC),
        timedelta(minutes=10),
    )
    assert [r["trigger"]["slot_local"] for r in runs(conn, "ny-spring")] == [
        "2026-03-07 02:30 America/New_York",
        "2026-03-09 02:30 America/New_York",
        "2026-03-10 02:30 America/New_York",
    ]
    assert all(f.skipped == 0 for f in fired)  # 03-08 02:30 never existed: nothing was missed


def test_fall_back_fires_the_repeated_local_time_once(conn, apply):
    apply(recipe("ny-fall", "30 1 * * *", tz="America/New_York"))
    enable_at(conn, "ny-fall", datetime(2026, 10, 30, 12, tzinfo=UTC))
    walk(
        conn,
        datetime(2026, 10, 30, 12, tzinfo=UTC),
        datetime(2026, 11, 2, 12, tzinfo=UTC),
        timedelta(minutes=10),
    )
    got = runs(conn, "ny-fall")
    assert [(r["trigger"]["slot_local"], r["trigger"]["slot"]) for r in got] == [
        ("2026-10-31 01:30 America/New_York", "2026-10-31T05:30:00+00:00"),
        (
            "2026-11-01 01:30 America/New_York (UTC-04:00)",
            "2026-11-01T05:30:00+00:00",
        ),  # EDT: first
        ("2026-11-02 01:30 America/New_York", "2026-11-02T06:30:00+00:00"),
    ]


def test_racing_tickers_fire_each_slot_exactly_once(db_url, conn, apply):
    """Four tickers on four connections tick the same clock at the same moments (a barrier per
    step): each minute slot gets exactly one slot row and one run."""
    apply(recipe("contended", "* * * * *"))
    enable_at(conn, "contended", T0)
    n_threads, steps = 4, 40
    barrier = threading.Barrier(n_threads)
    fired: list[list[schedules.Fired]] = [[] for _ in range(n_threads)]
    errors: list[BaseException] = []

    def ticker(i: int) -> None:
        try:
            with db.connect(db_url) as c:
                for k in range(steps):
                    barrier.wait(timeout=60)
                    fired[i] += schedules.tick(
                        c, T0 + timedelta(seconds=31 + 30 * k), caller=f"ticker-{i}"
                    )
        except BaseException as err:  # surfaced below
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=ticker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    all_fired = [f for per in fired for f in per]
    slots = [datetime(2026, 11, 23, 7, 0, tzinfo=UTC) + timedelta(minutes=m) for m in range(20)]
    assert sorted(f.slot for f in all_fired) == slots
    rows = ticks(conn, "contended")
    assert [r["slot"] for r in rows] == slots and all(r["run_id"] for r in rows)
    assert len(runs(conn, "contended")) == 20
    assert conn.execute("select count(*) as n from absurd.t_threadline").fetchone()["n"] == 20
    assert len({f.run_id for f in all_fired}) == 20
    print("slots fired per ticker:", [len(per) for per in fired])


def test_a_failed_spawn_leaves_no_slot_row_and_the_slot_fires_later(conn, apply, caplog):
    """The slot row and the spawn commit together: when the spawn fails, so does the slot row,
    and the next tick fires the slot instead of losing it."""
    apply(recipe("atomic", "0 7 * * *"))
    enable_at(conn, "atomic", T0)
    conn.execute(
        "alter table threadline.run_threads add constraint refuse_runs check (false) not valid"
    )
    assert schedules.tick(conn, T0 + timedelta(minutes=1)) == []  # logged, not raised
    assert "workflow atomic: schedule tick failed" in caplog.text and "refuse_runs" in caplog.text
    assert ticks(conn, "atomic") == []
    assert conn.execute("select count(*) as n from absurd.t_threadline").fetchone()["n"] == 0
    conn.execute("alter table threadline.run_threads drop constraint refuse_runs")
    [fired] = schedules.tick(conn, T0 + timedelta(minutes=2))
    assert fired.slot == datetime(2026, 11, 23, 7, 0, tzinfo=UTC) and fired.run_id
    assert len(runs(conn, "atomic")) == 1


def test_a_failing_workflow_does_not_stop_the_schedules_after_it(conn, apply, caplog):
    """Each workflow ticks on its own: one whose spawn fails every time (sorted first) is logged
    with its slug, and the next workflow's slot still fires."""
    apply(recipe("a-broken", "0 7 * * *"))
    apply(recipe("b-fine", "0 7 * * *"))
    for slug in ("a-broken", "b-fine"):
        enable_at(conn, slug, T0)
    conn.execute(
        "alter table threadline.run_threads add constraint refuse_a "
        "check (workflow <> 'a-broken') not valid"
    )
    for minute in (1, 2):
        fired = schedules.tick(conn, T0 + timedelta(minutes=minute))
        assert [(f.workflow, f.slot) for f in fired] == (
            [("b-fine", datetime(2026, 11, 23, 7, 0, tzinfo=UTC))] if minute == 1 else []
        )
    assert caplog.text.count("workflow a-broken: schedule tick failed") == 2
    assert ticks(conn, "a-broken") == [] and len(runs(conn, "b-fine")) == 1


def test_a_racing_ticker_never_lists_as_skipped_a_slot_another_fired(db_url, conn, apply):
    """The catch-up plan is made under the workflow's row lock: a ticker that read the schedule
    before another fired 07:00 and then waited for the lock fires 08:00 with nothing skipped."""
    apply(recipe("raced", "0 * * * *"))
    enable_at(conn, "raced", T0)
    with db.connect(db_url) as first, db.connect(db_url) as late:
        result: list[schedules.Fired] = []
        with first.transaction():
            [fired] = schedules.tick(first, T0 + timedelta(minutes=1), caller="first")  # 07:00
            ticker = threading.Thread(
                target=lambda: result.extend(
                    schedules.tick(late, T0 + timedelta(hours=1, minutes=1), caller="late")
                )
            )
            ticker.start()  # reads no slot yet (07:00 is not committed), then waits for the lock
            harness.wait_for(
                lambda: conn.execute(
                    "select wait_event_type = 'Lock' as waiting"
                    " from pg_stat_activity where pid = %s",
                    (late.info.backend_pid,),
                ).fetchone()["waiting"],
                what="the late ticker to wait",
            )
        ticker.join(timeout=60)
    assert fired.slot.hour == 7 and [(f.slot.hour, f.skipped) for f in result] == [(8, 0)]
    assert [(r["slot"].hour, r["skipped"]) for r in ticks(conn, "raced")] == [(7, 0), (8, 0)]
    assert all(
        len(thread_texts(conn, r["run_id"])) == 1 for r in runs(conn, "raced")
    )  # no catch-up note


def test_disabling_or_clearing_stops_a_schedule_and_enabling_does_not_catch_up(conn, apply):
    apply(recipe("toggled", "* * * * *"))
    now = db.fetch_one(conn, "db_now")["now"]
    enable_at(conn, "toggled", now - timedelta(minutes=60))
    [first] = schedules.tick(
        conn, now - timedelta(minutes=20)
    )  # the last fired slot: 20 minutes ago
    set_enabled(conn, "toggled", False)
    assert schedules.tick(conn, now + timedelta(minutes=10)) == []
    # Enabled again (now, 20 slots after the last fired one): only slots after now count, so
    # catch-up stands for about 10 slots, not the 30 since the last fired slot.
    set_enabled(conn, "toggled", True)
    enabled_at = conn.execute(
        "select schedule_enabled_at as t from threadline.workflows where slug = 'toggled'"
    ).fetchone()["t"]
    assert enabled_at >= now
    [fired] = schedules.tick(conn, now + timedelta(minutes=10))
    since_enabled = schedules.Schedule("* * * * *").slots(
        enabled_at, now + timedelta(minutes=10), 100
    )
    assert fired.slot == since_enabled[-1] and fired.skipped == len(since_enabled) - 1
    assert 8 <= fired.skipped <= 9  # counting from the last fired slot would make it 29
    assert [r["skipped"] for r in ticks(conn, "toggled")] == [first.skipped, fired.skipped]
    # Editing the cron stamps a new start too; clearing the schedule stops it at once.
    apply(recipe("toggled", "*/2 * * * *"))
    assert conn.execute(
        "select schedule_enabled_at > %s as moved from threadline.workflows where slug = 'toggled'",
        (enabled_at,),
    ).fetchone()["moved"]
    apply(recipe("toggled", None))
    assert schedules.tick(conn, now + timedelta(hours=5)) == []
    assert len(runs(conn, "toggled")) == 2


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, THREADLINE_DATABASE_URL=url)
    return subprocess.run(
        [sys.executable, "-m", "engine_adapter.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_schedule_list_shows_words_and_the_next_three_fire_times(db_url, conn, apply):
    apply(recipe("morning", "0 7 * * *", tz="Europe/Berlin"))
    apply(recipe("weekdays", "*/15 9-17 * * 1-5", catch_up="all"))
    apply(recipe("unscheduled", None))
    set_enabled(conn, "weekdays", False)
    out = json.loads(cli(db_url, "schedule", "list", "--json").stdout)
    assert [s["workflow"] for s in out] == ["morning", "weekdays"]
    morning = out[0]
    assert (
        morning["description"] == "at 07:00 every day (Europe/Berlin)"
        and morning["catch_up"] == "latest"
    )
    assert len(morning["next_local"]) == 3 and all(
        t.endswith(" 07:00 Europe/Berlin") for t in morning["next_local"]
    )
    nxt = [datetime.fromisoformat(t) for t in morning["next"]]
    now = db.fetch_one(conn, "db_now")["now"]
    assert now < nxt[0] <= now + timedelta(days=1) and nxt[1] - nxt[0] == nxt[2] - nxt[
        1
    ] == timedelta(days=1)
    assert out[1]["enabled"] is False and out[1]["next"] == []
    text = cli(db_url, "schedule", "list").stdout
    assert "morning  0 7 * * *  at 07:00 every day (Europe/Berlin)  catch_up latest" in text
    assert "(disabled)" in text and text.count("    next ") == 3


@pytest.mark.slow
def test_real_clock_two_consecutive_minute_slots_one_run_each(db_url, conn, apply, procs):
    """REAL CLOCK (up to about 2.5 minutes): two conductor processes tick a `* * * * *` schedule on
    the database clock; the next two minute slots each start exactly one run, which completes."""
    procs.start("conductor")
    procs.start("conductor")
    procs.start("bots")
    procs.wait_alive("conductor", 2)
    apply(recipe("each-minute", "* * * * *", step="run_command: echo tick"))

    def two_runs() -> list[dict[str, Any]] | None:
        got = runs(conn, "each-minute")
        return got if len(got) >= 2 else None

    got = harness.wait_for(two_runs, timeout=200, interval=0.5, what="two scheduled runs")
    slots = [datetime.fromisoformat(r["trigger"]["slot"]) for r in got[:2]]
    assert slots[1] - slots[0] == timedelta(minutes=1) and slots[0].second == 0
    for r in got[:2]:
        harness.wait_for_state(db_url, str(r["run_id"]), "completed", timeout=60)
        assert r["trigger"]["caller"].startswith("conductor-")
    rows = ticks(conn, "each-minute")
    assert [r["slot"] for r in rows[:2]] == slots
    # Exactly one run per slot, though two conductors ticked every second.
    dup = conn.execute(
        "select trigger ->> 'slot' as slot, count(*) as n from threadline.run_threads "
        "group by 1 having count(*) > 1"
    ).fetchall()
    assert dup == []
