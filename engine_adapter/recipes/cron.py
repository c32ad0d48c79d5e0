"""Cron schedules evaluated in an IANA time zone, and described in words.

A schedule is a 5-field cron expression (`*`, lists, ranges, steps, names) matched against the
local wall-clock time of its zone. cronsim parses and matches the fields on naive local times;
this module turns each matching local time into one instant by the daylight-saving rule below.

The daylight-saving rule: a local time that does not exist (the hour skipped when clocks spring
forward) is skipped, and a local time that occurs twice (the hour repeated when clocks fall back)
fires once, at its first occurrence. So `30 2 * * *` in America/New_York does not fire on
2026-03-08, `30 1 * * *` fires once on 2026-11-01, and `* * * * *` fires each local minute once
(not again in the repeated hour). A label of a time in the repeated hour carries its UTC offset,
so "01:30 America/New_York (UTC-04:00)" says which of the two it is.
"""

from __future__ import annotations

import json
import re
import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from cronsim import CronSim, CronSimError

from engine_adapter.model.errors import Invalid

# Search far enough back that the latest slot is found across the largest daylight-saving shift.
_MAX_SHIFT = timedelta(hours=3)
# IANA names: segments of letters, digits, _ + - joined by /; the longest is 32 characters.
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]{1,30}(?:/[A-Za-z0-9_+-]{1,30}){0,2}")
MAX_EXPR = 500


class CronError(Invalid):
    """A cron expression or time zone is invalid; the message names the value."""


def _q(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def check_expr(expr: str) -> str:
    """The expression with its spacing normalised; CronError unless it is valid 5-field cron."""
    if not isinstance(expr, str) or len(expr) > MAX_EXPR:
        raise CronError(
            f"{_q(expr)[:80]} must be a 5-field cron expression (at most {MAX_EXPR} characters)"
        )
    expr = " ".join(expr.split())
    if len(expr.split()) != 5:
        raise CronError(f"{_q(expr)} must be a 5-field cron expression")
    try:
        CronSim(expr, datetime(2000, 1, 1))
    except (CronSimError, ValueError, OverflowError) as exc:
        raise CronError(f"{_q(expr)} is not a valid cron expression ({exc})") from None
    return expr


def zone(tz: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone named tz; CronError naming it otherwise (also for a name that is a
    directory, too long, or a file that is no zone: nothing about the file system leaks out)."""
    if not isinstance(tz, str) or not _ZONE_NAME.fullmatch(tz):
        raise CronError(f"{_q(tz)[:80]} is not an IANA time zone (e.g. Europe/Berlin)")
    try:
        return zoneinfo.ZoneInfo(tz)
    except Exception:  # not found, a directory, unreadable, not TZif: all "no zone"
        raise CronError(f"{_q(tz)} is not an IANA time zone (e.g. Europe/Berlin)") from None


def resolve(local: datetime, zone: zoneinfo.ZoneInfo) -> datetime | None:
    """The instant a naive local time fires at, by the daylight-saving rule (None: skipped)."""
    first = local.replace(tzinfo=zone, fold=0)
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != local:
        return None  # in the gap: this local time does not exist
    return first.astimezone(UTC)


class Schedule:
    """One cron expression in one time zone. Instants in and out are timezone-aware."""

    def __init__(self, expr: str, tz: str = "UTC") -> None:
        self.expr = check_expr(expr)
        self.tz = tz
        self.zone = zone(tz)

    def _local(self, t: datetime) -> datetime:
        return t.astimezone(self.zone).replace(tzinfo=None, second=0, microsecond=0)

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Fire instants strictly after `after`, in order (UTC)."""
        # A local time at or before after's local reading fires at or before `after` (first
        # occurrences are monotonic), so starting there misses nothing.
        for local in CronSim(self.expr, self._local(after)):
            fired = resolve(local, self.zone)
            if fired is not None and fired > after:
                yield fired

    def next_after(self, after: datetime) -> datetime | None:
        return next(self.iter_after(after), None)

    def next_times(self, after: datetime, n: int) -> list[datetime]:
        out: list[datetime] = []
        for fired in self.iter_after(after):
            out.append(fired)
            if len(out) == n:
                break
        return out

    def slots(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """Fire instants in (after, until], oldest first, at most `limit` of them."""
        out: list[datetime] = []
        for fired in self.iter_after(after):
            if fired > until or len(out) == limit:
                break
            out.append(fired)
        return out

    def latest(self, until: datetime) -> datetime | None:
        """The most recent fire instant at or before `until`."""
        # In a repeated hour later local readings may still fire before `until` (their first
        # occurrence): walk back from one shift later and take the first that is not after it.
        for local in CronSim(self.expr, self._local(until) + _MAX_SHIFT, reverse=True):
            fired = resolve(local, self.zone)
            if fired is not None and fired <= until:
                return fired
        return None

    def label(self, slot: datetime) -> str:
        """A slot in the schedule's own local time: "2026-11-23 07:00 Europe/Berlin"; in an hour
        that repeats, with its UTC offset: "2026-11-01 01:30 America/New_York (UTC-04:00)"."""
        local = slot.astimezone(self.zone)
        text = f"{local:%Y-%m-%d %H:%M} {self.tz}"
        if local.replace(fold=0).utcoffset() != local.replace(fold=1).utcoffset():
            offset = local.strftime("%z")
            text += f" (UTC{offset[:3]}:{offset[3:]})"
        return text

    def describe(self) -> str:
        """In words: "at 07:00 every day (Europe/Berlin)"."""
        words = CronSim(self.expr, datetime(2000, 1, 1)).explain()
        return f"{words[:1].lower()}{words[1:]} ({self.tz})"
