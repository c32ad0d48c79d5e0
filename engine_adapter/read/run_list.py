"""The one runs list (the CLI's `runs` and the console's runs page): filters that round-trip
through a URL, keyset pages of typed rows, counts and chart data.

Every query is bounded; pages are keyset (created_at, run_id), so page 2,000 costs what page 1 does.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import psycopg

from engine_adapter.model.domain import RUN_STATES, TRIGGER_KINDS
from engine_adapter.model.errors import Invalid
from engine_adapter.model.vocab import TriggerKind
from engine_adapter.store import db

PAGE_SIZE = 50


class FilterError(Invalid):
    """A filter value that makes no sense; the message names the filter and the value."""


@dataclass(frozen=True)
class RunFilters:
    workflow: str | None = None
    state: str | None = None
    trigger: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    search: str | None = None

    @classmethod
    def from_params(cls, params: dict[str, str]) -> RunFilters:
        """From URL query parameters; unknown parameters are ignored, empty ones mean "any"."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = (params.get(f.name) or "").strip()
            if not raw:
                continue
            if f.name in ("since", "until"):
                values[f.name] = _parse_time(f.name, raw)
            else:
                values[f.name] = raw
        filters = cls(**values)
        filters.check()
        return filters

    def check(self) -> None:
        if self.state is not None and self.state not in RUN_STATES:
            raise FilterError(f"state: {self.state!r} is not a run state ({', '.join(RUN_STATES)})")
        if self.trigger is not None and self.trigger not in TRIGGER_KINDS:
            raise FilterError(
                f"trigger: {self.trigger!r} is not a trigger ({', '.join(TRIGGER_KINDS)})"
            )
        if self.since and self.until and self.since >= self.until:
            raise FilterError(
                f"since ({self.since.isoformat()}) must be before until ({self.until.isoformat()})"
            )

    def to_params(self) -> dict[str, str]:
        out = {}
        for name, value in asdict(self).items():
            if value is None:
                continue
            out[name] = value.isoformat() if isinstance(value, datetime) else str(value)
        return out

    def sql_params(self) -> dict[str, Any]:
        params: dict[str, Any] = asdict(self)
        term = self.search
        escaped = _escape_like(term) if term else None
        params["search_any"] = f"%{escaped}%" if term else None
        return params

    def without_state(self) -> RunFilters:
        return replace(self, state=None)

    def counted_as_kept(self) -> bool:
        """Whether the counts kept by day and workflow (migration 026) answer these filters."""
        return not (self.trigger or self.since or self.until or self.search)


def _parse_time(name: str, raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(
            f"{name}: {raw!r} is not a date or time (use e.g. 2026-11-23 or 2026-11-23T07:00Z)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@dataclass(frozen=True)
class Cursor:
    """Where the next page starts: just after this (created_at, run_id)."""

    created_at: datetime
    run_id: str

    def encode(self) -> str:
        return f"{self.created_at.isoformat()}~{self.run_id}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        at, sep, run_id = text.partition("~")
        try:
            if not sep:
                raise ValueError(text)
            return cls(datetime.fromisoformat(at), str(uuid.UUID(run_id)))
        except ValueError:
            raise FilterError(f"after: {text!r} is not a page cursor") from None


@dataclass(frozen=True)
class RunRow:
    """One run as every list shows it (the CLI's `runs`, the console's runs page)."""

    run_id: str
    workflow: str
    workflow_version: int
    state: str
    current_step: str | None
    trigger_kind: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RunRow:
        return cls(
            **{f.name: row[f.name] for f in fields(cls)}
            | {
                "run_id": str(row["run_id"]),
                "trigger_kind": row["trigger_kind"] or TriggerKind.MANUAL,
            }
        )

    def to_json(self) -> dict[str, Any]:
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Page:
    rows: list[RunRow]
    next_cursor: Cursor | None


def runs_page(
    conn: psycopg.Connection[Any],
    filters: RunFilters,
    after: Cursor | None = None,
    limit: int = PAGE_SIZE,
) -> Page:
    params = filters.sql_params() | {
        "after_at": after.created_at if after else None,
        "after_id": after.run_id if after else None,
        "limit": limit + 1,  # one more tells whether a next page exists
    }
    found = db.fetch_all(conn, "runs_page", params)
    rows = [RunRow.from_row(r) for r in found[:limit]]
    cursor = Cursor(rows[-1].created_at, rows[-1].run_id) if len(found) > limit else None
    return Page(rows, cursor)


def state_counts(conn: psycopg.Connection[Any], filters: RunFilters) -> dict[str, int]:
    wanted = filters.without_state()
    query = "run_state_counts_kept" if wanted.counted_as_kept() else "run_state_counts"
    rows = db.fetch_all(conn, query, wanted.sql_params())
    found = {r["state"]: r["runs"] for r in rows}
    return {state: found.get(state, 0) for state in RUN_STATES}


def utc_day(at: datetime) -> datetime:
    """The start of the UTC day of a moment (as threadline.run_day)."""
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


BUCKET_SECONDS = {"5 minutes": 300, "1 hour": 3600, "1 day": 86400}


def chart_window(filters: RunFilters, now: datetime) -> tuple[datetime, str]:
    """The charts' time window and bucket: the filter's range, else today and the 7 days before
    (whole UTC days, so the first bar is a whole day and the kept counts can draw it)."""
    since = filters.since or utc_day(now - timedelta(days=7))
    span = (filters.until or now) - since
    bucket = "1 hour" if span <= timedelta(days=3) else "1 day"
    if span <= timedelta(hours=3):
        bucket = "5 minutes"
    return since, bucket


class ChartWindow(TypedDict):
    since: datetime
    until: datetime
    bucket_s: int


class ChartData(TypedDict):
    """The runs page's charts: their window and a list of rows each."""

    window: ChartWindow
    over_time: list[dict[str, Any]]
    durations: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    agent_use: list[dict[str, Any]]


def chart_data(conn: psycopg.Connection[Any], filters: RunFilters) -> ChartData:
    now = db.fetch_row(conn, "db_now")["now"]
    since, bucket = chart_window(filters, now)
    common = dict(since=since, workflow=filters.workflow)
    # Whole days from a day's start: the counts kept by day answer (the charts ignore `until`).
    kept = "_kept" if bucket == "1 day" and since == utc_day(since) else ""
    return {
        # The window and bucket too: a chart drawn over its window keeps sensible ticks and bar
        # widths even with a single bucket of data.
        "window": {
            "since": since,
            "until": filters.until or now,
            "bucket_s": BUCKET_SECONDS[bucket],
        },
        "over_time": db.fetch_all(conn, "runs_over_time" + kept, common | {"bucket": bucket}),
        "durations": db.fetch_all(conn, "step_durations", common | {"limit": 5000}),
        "failures": db.fetch_all(conn, "failures_by_step" + kept, common),
        "agent_use": db.fetch_all(conn, "agent_use_by_workflow", common),
    }
