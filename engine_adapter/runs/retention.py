"""Threadline cleans up after itself: finished runs past their retention go, with their child
runs, thread, journal and the engine's rows; streamed command output goes sooner; the engine's old
events, processes dead for a day and schedule slots past the run retention (each workflow's latest
kept: its schedule resumes from it) are pruned by the same job.

A workflow sets `retention: {runs: 90d, output: 7d}`; the global defaults (180 days, 30 days)
are `threadline retention set runs|output DURATION`. The conductor runs the job at start and
hourly (one conductor at a time), `threadline cleanup [--dry-run]` runs it now. It works in
bounded batches, one transaction each, and skips any run a live writer holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine_adapter.access import authorization
from engine_adapter.model.errors import Invalid
from engine_adapter.model.identity import Actor
from engine_adapter.model.recipe_values import (
    RETENTION_KEYS,
    format_duration,
    parse_duration,
    retention_seconds,
)
from engine_adapter.store import db

BATCH = 100  # runs per transaction
MAX_BATCHES = 50  # per job; the rest waits for the next one
EVENTS_BATCH = 1000
TICKS_BATCH = 1000  # schedule slots per transaction
EVERY_S = 3600.0


class RetentionError(Invalid):
    pass


@dataclass(frozen=True)
class Report:
    runs: int = 0  # top-level runs (their child runs go with them)
    outputs: int = 0  # streamed output entries
    events: int = 0  # the engine's emitted events
    workers: int = 0  # processes dead for a day
    ticks: int = 0  # schedule slots past the run retention
    dry_run: bool = False

    def line(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        return (
            f"cleanup {verb} {self.runs} run(s) with their child runs, {self.outputs} output "
            f"line(s), {self.events} engine event(s), {self.ticks} schedule slot(s), "
            f"{self.workers} dead process(es)"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def by_workflow(conn: psycopg.Connection[Any]) -> dict[str, Jsonb]:
    """Each workflow's retention of runs and of output in seconds (its own, else the default),
    as the queries take them: {"runs": {slug: s}, "output": {slug: s}}."""
    row = db.fetch_row(conn, "retention_defaults")
    default = {"runs": row["runs_s"], "output": row["output_s"]}
    out: dict[str, dict[str, float]] = {key: {} for key in RETENTION_KEYS}
    for wf in db.fetch_all(conn, "workflow_retentions"):
        own = wf["retention"] or {}
        for key in RETENTION_KEYS:
            out[key][wf["slug"]] = parse_duration(own[key]) if key in own else default[key]
    return {key: Jsonb(value) for key, value in out.items()}


def cleanup(
    conn: psycopg.Connection[Any], by: str, *, dry_run: bool = False, actor: Actor | None = None
) -> Report | None:
    """Run the job now; None when another process is running it. A person's door passes its
    actor (the authorization layer decides; the conductor's own runs pass none)."""
    if actor is not None and not dry_run:
        authorization.authorize(conn, actor, authorization.Action.CLEANUP)
    if dry_run:
        counts = db.fetch_row(conn, "count_past_retention", by_workflow(conn))
        return Report(
            counts["runs"],
            counts["outputs"],
            counts["events"],
            counts["workers"],
            counts["ticks"],
            dry_run=True,
        )
    if not db.fetch_row(conn, "try_cleanup_lock")["locked"]:
        return None
    try:
        record = db.fetch_row(conn, "start_cleanup", dict(by=by))["id"]
        report, error = Report(), None
        try:
            report = _remove(conn)
        except psycopg.Error as err:
            error = f"{type(err).__name__}: {err}"
            raise
        finally:
            conn.execute(
                db.q("finish_cleanup"),
                dict(
                    id=record,
                    runs=report.runs,
                    outputs=report.outputs,
                    events=report.events,
                    workers=report.workers,
                    ticks=report.ticks,
                    error=error,
                ),
            )
        return report
    finally:
        db.fetch_one(conn, "unlock_cleanup")


def _remove(conn: psycopg.Connection[Any]) -> Report:
    keep = by_workflow(conn)
    runs = _in_batches(conn, "runs_past_retention", "delete_runs", keep)
    outputs = _in_batches(conn, "outputs_past_retention", "delete_outputs", keep)
    events = db.fetch_row(conn, "cleanup_engine_events", dict(limit=EVENTS_BATCH))
    workers = db.fetch_row(conn, "prune_dead_workers")
    ticks = _prune_ticks(conn, keep["runs"])
    db.fetch_one(conn, "fold_run_counts")  # the runs page's counts read fewer rows
    return Report(runs, outputs, events["removed"], workers["removed"], ticks)


def _prune_ticks(conn: psycopg.Connection[Any], runs: Jsonb) -> int:
    """Schedule slots past the run retention, a batch per transaction (MAX_BATCHES at most)."""
    removed = 0
    for _ in range(MAX_BATCHES):
        with conn.transaction():
            batch = db.fetch_row(conn, "prune_schedule_ticks", dict(runs=runs, limit=TICKS_BATCH))
        removed += batch["removed"]
        if batch["removed"] < TICKS_BATCH:
            break
    return removed


def _in_batches(
    conn: psycopg.Connection[Any], select: str, delete: str, keep: dict[str, Jsonb]
) -> int:
    """Select a batch, delete it in its own transaction, until none is left (or MAX_BATCHES)."""
    removed = 0
    for _ in range(MAX_BATCHES):
        with conn.transaction():
            ids = [r["run_id"] for r in db.fetch_all(conn, select, dict(keep, limit=BATCH))]
            if not ids:
                break
            removed += db.fetch_row(conn, delete, dict(run_ids=ids))["removed"]
        if len(ids) < BATCH:
            break
    return removed


def last(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    """The last cleanup: when, by whom, what it removed (or its error)."""
    return db.fetch_one(conn, "last_cleanup")


def describe_last(row: dict[str, Any] | None) -> str:
    if row is None:
        return "Cleanup has not run yet."
    when = f"{row['started_at']:%Y-%m-%d %H:%M %Z}"
    if row["error"]:
        return f"Cleanup at {when} by {row['by_worker']} failed: {row['error']}"
    if row["finished_at"] is None:
        return f"Cleanup running since {when} ({row['by_worker']})."
    return (
        f"Last cleanup {when} by {row['by_worker']}: removed {row['runs_removed']} run(s), "
        f"{row['outputs_removed']} output line(s), {row['events_removed']} engine event(s), "
        f"{row['ticks_removed']} schedule slot(s), {row['workers_removed']} dead process(es)."
    )


def defaults(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    row = db.fetch_row(conn, "retention_defaults")
    return {
        "runs": format_duration(row["runs_s"]),
        "output": format_duration(row["output_s"]),
        "set_by": row["set_by"],
        "set_at": row["set_at"],
    }


def set_default(conn: psycopg.Connection[Any], key: str, duration: str, actor: Actor) -> None:
    """Set the global retention of runs or of output; errors name the key and the value."""
    if key not in RETENTION_KEYS:
        raise RetentionError(f"retention {key!r} must be 'runs' or 'output'")
    try:
        seconds = int(retention_seconds(duration))
    except ValueError as err:
        raise RetentionError(f"retention {key}: {err}") from None
    target = dict(detail={key: duration})
    with authorization.transaction(conn, actor, authorization.Action.SET_RETENTION, **target):
        row = db.fetch_row(conn, "retention_defaults")
        values = {"runs": row["runs_s"], "output": row["output_s"], key: seconds}
        if values["output"] > values["runs"]:
            raise RetentionError(
                f"retention {key}: output ({format_duration(values['output'])}) must not be "
                f"longer than runs ({format_duration(values['runs'])})"
            )
        conn.execute(
            db.q("set_retention_defaults"),
            dict(runs_s=values["runs"], output_s=values["output"], set_by=actor.label),
        )
