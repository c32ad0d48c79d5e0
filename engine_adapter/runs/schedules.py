"""The schedule tick: fire each workflow's due cron slots, each (workflow, slot) exactly once.

The conductor calls `tick` about once a second on the database clock; tests pass `now` to walk a
clock through many slots in milliseconds. A slot fires in ONE transaction that locks the workflow
row, plans what is due from what it reads under that lock, writes the slot row
(`threadline.schedule_ticks`) and spawns the run, so however many conductors tick, and wherever
one crashes, a slot is neither lost nor doubled, nor listed as skipped when another one fired it.
A workflow whose tick fails is logged and retried next tick; the other schedules go on.

Only slots after the later of the last handled slot and the moment the schedule took effect count.
After downtime, `catch_up` says what to do with the slots missed:
  latest (default)  one run for the most recent slot, with a thread note listing the ones skipped
  all               one run per slot, oldest first (at most ALL_PER_TICK per tick)
  none              only a slot that is still on time (ON_TIME_S) runs; the rest are skipped
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from engine_adapter.model.vocab import TriggerKind
from engine_adapter.recipes.cron import CronError, Schedule
from engine_adapter.runs import pause, thread_entries
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db

log = logging.getLogger("threadline.schedules")

ALL_PER_TICK = 100  # catch_up: all fires at most this many slots per tick; the next tick goes on
SKIPPED_LISTED = 1000  # how many skipped slots catch-up counts and names, at most
ON_TIME_S = 60.0  # catch_up: none still fires a slot this late (a busy or restarting conductor)


@dataclass(frozen=True)
class Due:
    slot: datetime
    fire: bool  # False: handled as skipped (catch_up: none), no run
    skipped: tuple[datetime, ...] = field(default=())  # earlier missed slots this one stands for


@dataclass(frozen=True)
class Fired:
    workflow: str
    slot: datetime
    run_id: str | None  # None: the slot was skipped
    skipped: int


def due_slots(
    schedule: Schedule, catch_up: str, after: datetime, now: datetime, *, limit: int = ALL_PER_TICK
) -> list[Due]:
    """What to do now with the slots in (after, now], by the catch_up policy (at most `limit`)."""
    first = schedule.next_after(after)
    if first is None or first > now:
        return []
    if catch_up == "all":
        return [Due(slot, True) for slot in schedule.slots(after, now, limit)]
    latest = schedule.latest(now)
    assert latest is not None and latest >= first
    earlier = tuple(s for s in schedule.slots(after, latest, SKIPPED_LISTED + 1) if s < latest)
    if catch_up == "none" and (now - latest).total_seconds() > ON_TIME_S:
        return [Due(latest, False, earlier)]
    return [Due(latest, True, earlier)]


def tick(
    conn: psycopg.Connection[Any], now: datetime | None = None, *, caller: str = "schedule"
) -> list[Fired]:
    """Fire every due slot of every enabled schedule; returns what this call fired or skipped."""
    if now is None:
        now = db.fetch_row(conn, "db_now")["now"]
    out: list[Fired] = []
    if pause.state(conn) is not None:
        return out  # paused: no slot fires; after unpause each schedule's catch_up applies
    for wf in db.fetch_all(conn, "scheduled_workflows", dict(all=False)):
        try:
            out += _tick_workflow(conn, wf, now, caller)
        except Exception:  # one broken workflow must not stop the schedules after it
            log.exception("workflow %s: schedule tick failed; retried next tick", wf["slug"])
    return out


def _plan(
    wf: dict[str, Any], last_slot: datetime | None, now: datetime
) -> tuple[Schedule, list[Due]]:
    """The workflow's schedule and the next thing due now after its last handled slot."""
    schedule = Schedule(wf["schedule"], wf["timezone"])
    after = max((t for t in (last_slot, wf["schedule_enabled_at"]) if t is not None), default=now)
    return schedule, due_slots(schedule, wf["catch_up"], after, now, limit=1)


def _tick_workflow(
    conn: psycopg.Connection[Any], wf: dict[str, Any], now: datetime, caller: str
) -> list[Fired]:
    """Fire one workflow's due slots, one transaction each (catch_up: all fires several)."""
    try:
        _, due = _plan(wf, wf["last_slot"], now)  # a cheap look without the lock: anything due?
    except CronError as err:  # recipes are validated on apply; an old row may predate a rule
        log.warning("workflow %s: schedule not evaluated: %s", wf["slug"], err)
        return []
    out: list[Fired] = []
    if not due:
        return out
    while len(out) < ALL_PER_TICK:
        fired = _fire(conn, wf["slug"], now, caller)
        if fired is None:
            break  # nothing due any more: disabled, cleared, or another conductor fired it
        out.append(fired)
    return out


def _fire(conn: psycopg.Connection[Any], slug: str, now: datetime, caller: str) -> Fired | None:
    """Fire (or skip) the workflow's next due slot, planned under its row lock."""
    with conn.transaction():
        wf = db.fetch_one(conn, "lock_scheduled_workflow", dict(slug=slug))
        if wf is None:
            return None  # disabled or cleared since it was read: stop at once
        last = db.fetch_row(conn, "last_schedule_tick", dict(workflow=slug))["slot"]
        schedule, due = _plan(wf, last, now)
        if not due:
            return None
        return _handle(conn, slug, schedule, due[0], caller)


def _handle(
    conn: psycopg.Connection[Any], slug: str, schedule: Schedule, due: Due, caller: str
) -> Fired | None:
    """Write the slot row and spawn its run (inside the caller's transaction)."""
    slot = due.slot
    row = db.fetch_one(
        conn, "insert_schedule_tick", dict(workflow=slug, slot=slot, skipped=len(due.skipped))
    )
    if row is None:
        return None
    if not due.fire:
        return Fired(slug, slot, None, len(due.skipped) + 1)
    trigger: dict[str, Any] = {
        "kind": TriggerKind.SCHEDULE,
        "caller": caller,
        "slot": slot.isoformat(),
        "slot_local": schedule.label(slot),
        "timezone": schedule.tz,
        "cron": schedule.expr,
    }
    if due.skipped:
        trigger["skipped"] = len(due.skipped)
    key = f"schedule:{slug}:{slot.isoformat()}"
    run_id = spawn(conn, slug, {}, trigger=trigger, idempotency_key=key).run_id
    conn.execute(db.q("set_schedule_tick_run"), dict(workflow=slug, slot=slot, run_id=run_id))
    if due.skipped:
        thread_entries.system_note(
            conn,
            run_id,
            _skipped_note(schedule, slot, due.skipped),
            dedupe_key="catch-up",
            data={"skipped": [s.isoformat() for s in due.skipped]},
        )
    return Fired(slug, slot, run_id, len(due.skipped))


def _skipped_note(schedule: Schedule, slot: datetime, skipped: tuple[datetime, ...]) -> str:
    listed = skipped[:SKIPPED_LISTED]
    count = f"more than {SKIPPED_LISTED}" if len(skipped) > SKIPPED_LISTED else str(len(skipped))
    shown = ", ".join(schedule.label(s) for s in listed[:20]) + (", …" if len(listed) > 20 else "")
    return (
        f"Catch-up after missed slots: this run stands for the latest, {schedule.label(slot)}; "
        f"skipped {count} earlier slot{'s' if len(skipped) != 1 else ''}: {shown}."
    )


def schedule_list(
    conn: psycopg.Connection[Any], now: datetime | None = None, *, upcoming: int = 3
) -> list[dict[str, Any]]:
    """Every schedule in words with its next fire times (disabled ones too, marked so)."""
    if now is None:
        now = db.fetch_row(conn, "db_now")["now"]
    out = []
    for wf in db.fetch_all(conn, "scheduled_workflows", dict(all=True)):
        item: dict[str, Any] = {
            "workflow": wf["slug"],
            "schedule": wf["schedule"],
            "timezone": wf["timezone"],
            "catch_up": wf["catch_up"],
            "enabled": wf["enabled"],
            "last_slot": wf["last_slot"].isoformat() if wf["last_slot"] else None,
            "last_run_id": str(wf["last_run_id"]) if wf["last_run_id"] else None,
        }
        try:
            schedule = Schedule(wf["schedule"], wf["timezone"])
        except CronError as err:
            out.append(
                item | {"description": f"not evaluated: {err}", "next": [], "next_local": []}
            )
            continue
        nxt = schedule.next_times(now, upcoming) if wf["enabled"] else []
        out.append(
            item
            | {
                "description": schedule.describe(),
                "next": [t.isoformat() for t in nxt],
                "next_local": [schedule.label(t) for t in nxt],
            }
        )
    return out
