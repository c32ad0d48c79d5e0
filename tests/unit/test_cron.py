"""Cron in a time zone: fields, both daylight-saving transitions, words, and catch-up planning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine_adapter.recipes.cron import CronError, Schedule
from engine_adapter.recipes.recipes import RecipeError, load_recipe_text
from engine_adapter.runs.schedules import ON_TIME_S, due_slots


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(s: Schedule, times: list[datetime]) -> list[str]:
    return [f"{t.astimezone(s.zone):%Y-%m-%d %H:%M %Z}" for t in times]


def test_spring_forward_skips_a_local_time_that_does_not_exist():
    s = Schedule("30 2 * * *", "America/New_York")  # 2026-03-08 02:00 -> 03:00
    assert local(s, s.next_times(utc(2026, 3, 6, 12), 3)) == [
        "2026-03-07 02:30 EST",
        "2026-03-09 02:30 EDT",
        "2026-03-10 02:30 EDT",
    ]
    # A minutely schedule has no 02:xx that day either: 01:59 EST is followed by 03:00 EDT.
    m = Schedule("* * * * *", "America/New_York")
    assert local(m, m.slots(utc(2026, 3, 8, 6, 58), utc(2026, 3, 8, 7, 1), 10)) == [
        "2026-03-08 01:59 EST",
        "2026-03-08 03:00 EDT",
        "2026-03-08 03:01 EDT",
    ]


def test_fall_back_fires_a_repeated_local_time_once_at_its_first_occurrence():
    s = Schedule("30 1 * * *", "America/New_York")  # 2026-11-01 02:00 EDT -> 01:00 EST
    slots = s.slots(utc(2026, 10, 31, 12), utc(2026, 11, 2, 12), 10)
    assert slots == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]  # 01:30 EDT, then 01:30 EST
    assert local(s, slots) == ["2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"]
    # Asked from inside the repeated hour (01:45 EST), the next slot is the next day's.
    assert s.next_after(utc(2026, 11, 1, 6, 45)) == utc(2026, 11, 2, 6, 30)


def test_fall_back_minutely_and_latest_inside_the_repeated_hour():
    s = Schedule("*/20 * * * *", "America/New_York")
    slots = s.slots(utc(2026, 11, 1, 4, 50), utc(2026, 11, 1, 7, 30), 20)
    # 00:00, 00:20, ..., 01:40 EDT, then nothing until 02:00 EST: 01:xx EST already fired.
    assert [t.strftime("%H:%M") for t in slots] == ["05:00", "05:20", "05:40", "07:00", "07:20"]
    assert len(set(slots)) == len(slots)
    # At 01:50 EST (06:50 UTC) the latest slot is 01:40 EDT, though the local clock reads later.
    assert s.latest(utc(2026, 11, 1, 6, 50)) == utc(2026, 11, 1, 5, 40)
    assert s.latest(utc(2026, 11, 1, 7, 0)) == utc(2026, 11, 1, 7, 0)


def test_berlin_spring_forward_and_a_plain_day():
    s = Schedule("30 2 * * *", "Europe/Berlin")  # 2026-03-29 02:00 CET -> 03:00 CEST
    assert local(s, s.next_times(utc(2026, 3, 27, 12), 3)) == [
        "2026-03-28 02:30 CET",
        "2026-03-30 02:30 CEST",
        "2026-03-31 02:30 CEST",
    ]
    assert Schedule("0 7 * * *", "Europe/Berlin").next_after(utc(2026, 11, 23, 5)) == utc(
        2026, 11, 23, 6
    )


def test_lists_ranges_steps_and_names():
    s = Schedule("0,30 9-10 * * mon-fri", "UTC")
    week = s.slots(utc(2026, 11, 20, 0), utc(2026, 11, 24, 0), 50)  # Fri 20th .. Mon 23rd
    assert [t.strftime("%a %H:%M") for t in week] == [
        "Fri 09:00",
        "Fri 09:30",
        "Fri 10:00",
        "Fri 10:30",
        "Mon 09:00",
        "Mon 09:30",
        "Mon 10:00",
        "Mon 10:30",
    ]
    every = Schedule("*/15 * * * *")
    assert every.slots(utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 1, 0), 10) == [
        utc(2026, 1, 1, 0, 15),
        utc(2026, 1, 1, 0, 30),
        utc(2026, 1, 1, 0, 45),
        utc(2026, 1, 1, 1, 0),
    ]


def test_words_and_labels():
    s = Schedule("0 7 * * *", "Europe/Berlin")
    assert s.describe() == "at 07:00 every day (Europe/Berlin)"
    assert Schedule("* * * * *").describe() == "every minute (UTC)"
    assert s.label(utc(2026, 11, 23, 6)) == "2026-11-23 07:00 Europe/Berlin"


def test_labels_in_the_repeated_hour_say_which_one():
    ny = Schedule("30 1 * * *", "America/New_York")
    # 2026-11-01 01:30 happens twice in New York: at 05:30 UTC (EDT) and at 06:30 UTC (EST).
    assert ny.label(utc(2026, 11, 1, 5, 30)) == "2026-11-01 01:30 America/New_York (UTC-04:00)"
    assert ny.label(utc(2026, 11, 1, 6, 30)) == "2026-11-01 01:30 America/New_York (UTC-05:00)"
    # Either side of the repeated hour, and on an ordinary day, a label needs no offset.
    assert ny.label(utc(2026, 11, 1, 4, 59)) == "2026-11-01 00:59 America/New_York"
    assert ny.label(utc(2026, 11, 1, 7, 0)) == "2026-11-01 02:00 America/New_York"
    assert ny.label(utc(2026, 11, 2, 6, 30)) == "2026-11-02 01:30 America/New_York"


def test_bad_expressions_and_zones_name_the_value():
    with pytest.raises(CronError, match='"0 7 \\* \\*" must be a 5-field'):
        Schedule("0 7 * *")
    with pytest.raises(CronError, match='"61 \\* \\* \\* \\*" is not a valid cron expression'):
        Schedule("61 * * * *")
    with pytest.raises(CronError, match='"Mars/Olympus" is not an IANA time zone'):
        Schedule("* * * * *", "Mars/Olympus")


# -- catch-up planning (pure: the tick applies it on the database) ---------------------------------
HOURLY = Schedule("0 * * * *")
ENABLED = utc(2026, 11, 23, 0, 30)


def test_nothing_due_before_the_first_slot_after_enabling():
    assert due_slots(HOURLY, "latest", ENABLED, utc(2026, 11, 23, 0, 59)) == []


def test_latest_fires_the_most_recent_slot_and_lists_the_skipped():
    [due] = due_slots(HOURLY, "latest", ENABLED, utc(2026, 11, 23, 4, 10))
    assert due.fire and due.slot == utc(2026, 11, 23, 4)
    assert due.skipped == (utc(2026, 11, 23, 1), utc(2026, 11, 23, 2), utc(2026, 11, 23, 3))
    # The slot at 00:00 came before the schedule was enabled: never counted.
    [on_time] = due_slots(HOURLY, "latest", ENABLED, utc(2026, 11, 23, 1, 0, 1))
    assert on_time.slot == utc(2026, 11, 23, 1) and on_time.skipped == ()


def test_all_fires_every_missed_slot_oldest_first():
    dues = due_slots(HOURLY, "all", ENABLED, utc(2026, 11, 23, 4, 10))
    assert [(d.slot.hour, d.fire, d.skipped) for d in dues] == [(h, True, ()) for h in (1, 2, 3, 4)]


def test_none_fires_only_a_slot_still_on_time():
    [late] = due_slots(HOURLY, "none", ENABLED, utc(2026, 11, 23, 4, 10))
    assert not late.fire and late.slot == utc(2026, 11, 23, 4) and len(late.skipped) == 3
    [on_time] = due_slots(
        HOURLY, "none", ENABLED, utc(2026, 11, 23, 4) + timedelta(seconds=ON_TIME_S - 1)
    )
    assert on_time.fire and on_time.slot == utc(2026, 11, 23, 4)


def test_recipe_trigger_fields():
    base = "slug: x\nsteps:\n  - id: a\n    sleep: 1s\n"
    assert load_recipe_text(base + 'schedule: "0 7 * * *"\n').catch_up == "latest"
    assert load_recipe_text(base).catch_up is None
    assert load_recipe_text(base + "on_event: deploy.done\n").on_event == "deploy.done"
    with pytest.raises(RecipeError) as info:
        load_recipe_text(base + "on_event: 'has space'\ncatch_up: all\n")
    assert info.value.errors == [
        "catch_up: only applies with a schedule",
        'on_event: "has space" must be an event name matching [A-Za-z0-9_.:/-]{1,200}',
    ]
