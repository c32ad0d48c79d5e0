"""pandas DataFrames of one run, for notebooks: its steps and thread (from the read model), and a
timeline of step tries, bot attempts, done events and process liveness, drawn by timeline_figure.

Every time in these frames comes from the database clock, so they can be compared with each other.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import psycopg

from engine_adapter.model import domain, names
from engine_adapter.model.vocab import AttemptOutcome
from engine_adapter.read import step_tree
from engine_adapter.read.read_model import run_view
from engine_adapter.recipes.render import as_text
from engine_adapter.runs import thread_entries
from engine_adapter.runs.run_ids import takes_run_id
from engine_adapter.store import db
from engine_adapter.store.workers import list_workers

STEP_COLUMNS = ["id", "kind", "status", "attempts", "tries", "output"]
THREAD_COLUMNS = ["seq", "created_at", "author_kind", "author", "kind", "step", "step_key", "text"]
TRY_COLUMNS = ["step_key", "step", "try", "sent_at", "ended_at", "outcome"]
TIMELINE_COLUMNS = ["lane", "kind", "start", "finish", "outcome", "detail"]
TREE_COLUMNS = ["depth", "step", "kind", "status", "attempts", "detail", "output"]
HEADINGS = ("branch", "iteration")  # tree rows that head a branch or an iteration, not steps
NO_ATTEMPTS = (*HEADINGS, *domain.BLOCK_KINDS, domain.WORKFLOW)  # no bot ever runs these rows
FINAL_RESULT = (
    "signal.dispatch."  # entry kinds of a bot's final result for a step: completed, failed
)
ENTRY_LIMIT = 100_000
# A process counts as the run's when it beat within this window before the run started.
BEAT_WINDOW = timedelta(seconds=5)
# Process bars are clipped to the run's window plus this margin, so a long-lived process does
# not stretch the timeline to its whole life.
MARGIN = timedelta(seconds=1)


@takes_run_id  # the id, or a unique prefix of it
def steps_frame(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """One row per step of the recipe, as the read model shows it (its fields beyond these too)."""
    steps = run_view(conn, run_id).steps
    extra = [k for k in (steps[0] if steps else {}) if k not in STEP_COLUMNS]
    return pd.DataFrame(steps, columns=STEP_COLUMNS + extra)


@takes_run_id  # the id, or a unique prefix of it
def tree_frame(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """The run's step tree in drawing order (step_tree.flatten): one row per step, and a heading
    row per branch (of an if, or a parallel group's child run) and per iteration, with its depth.
    attempts counts a step's bot attempts (none for headings and blocks); detail says why a step
    was skipped, which branch was taken, or which child run a branch is and whether it finished
    first."""
    rows = []
    for depth, node in step_tree.flatten(run_view(conn, run_id).steps):
        detail = node.get("reason") or ""
        if "taken" in node:
            detail = "taken" if node["taken"] else "not taken"
        if node.get("run_id"):
            detail = f"run {names.short_run_id(node['run_id'])}"
            detail += " · finished first" if node.get("winner") else ""
        output = node.get("output")
        last = [] if output is None else as_text(output).strip().splitlines()[-1:]
        rows.append(
            {
                "depth": depth,
                "step": node["id"],
                "kind": node["kind"],
                "status": node["status"],
                "attempts": None if node["kind"] in NO_ATTEMPTS else node.get("attempts", 0),
                "detail": detail,
                "output": last[0][:80] if last else "",
            }
        )
    return pd.DataFrame(rows, columns=TREE_COLUMNS).astype({"attempts": "Int64"})


def tree_text(tree: pd.DataFrame) -> str:
    """A tree_frame drawn as text, nested rows indented under what holds them."""
    lines = []
    for row in tree.to_dict("records"):
        name = "  " * row["depth"] + row["step"]
        tail = [row["detail"], row["output"]]
        if not pd.isna(row["attempts"]):
            n = row["attempts"]
            tail.insert(0, f"{n} attempt{'' if n == 1 else 's'}")
        line = f"{name:<24} {row['kind']:<12} {row['status']:<10} " + " · ".join(
            t for t in tail if t
        )
        lines.append(line.rstrip())
    return "\n".join(lines)


@takes_run_id  # the id, or a unique prefix of it
def thread_frame(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """The run thread in order, one row per entry."""
    frame = pd.DataFrame([asdict(e) for e in run_view(conn, run_id).thread])
    if frame.empty:
        return pd.DataFrame(columns=THREAD_COLUMNS)
    frame["created_at"] = pd.to_datetime(frame["created_at"])
    frame["step"] = frame["step_key"].map(_step_of)
    return frame[THREAD_COLUMNS]


@takes_run_id  # the id, or a unique prefix of it
def step_tries_frame(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """Each step try: sent_at (its first thread entry), and when and how it ended: the step's final
    result from the bot, the gate decision, or for a sleep its planned wake-up time once that has
    passed (the next step's sent_at shows when the run actually woke)."""
    checkpoints = {
        c["checkpoint_name"]: c["state"]
        for c in db.fetch_all(conn, "run_checkpoints", dict(run_id=run_id))
    }
    now = db.fetch_row(conn, "db_now")["now"]
    tries: dict[str, dict[str, Any]] = {}
    for entry in _step_entries(conn, run_id):
        key = entry["step_key"]
        if key not in tries:
            _, step, try_no = names.split_step_key(key)
            tries[key] = {
                "step_key": key,
                "step": step,
                "try": try_no,
                "sent_at": entry["created_at"],
                "ended_at": None,
                "outcome": None,
            }
        if entry["kind"].startswith(FINAL_RESULT):
            tries[key].update(
                ended_at=entry["created_at"], outcome=entry["kind"].removeprefix(FINAL_RESULT)
            )
    for t in (t for t in tries.values() if t["outcome"] is None):
        decision = db.fetch_one(conn, "get_decision", dict(step_key=t["step_key"]))
        wake_at = (checkpoints.get(names.send_checkpoint(t["step"], t["try"])) or {}).get("wake_at")
        if decision is not None:
            t.update(ended_at=decision["created_at"], outcome=decision["decision"])
        elif wake_at is not None and datetime.fromisoformat(wake_at) <= now:
            t.update(ended_at=datetime.fromisoformat(wake_at), outcome="slept")
    rows = sorted(tries.values(), key=lambda t: (t["sent_at"], t["step_key"]))
    return pd.DataFrame(rows, columns=TRY_COLUMNS)


@takes_run_id  # the id, or a unique prefix of it
def attempts_frame(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """Every bot attempt (claim) of the run, oldest first."""
    frame = pd.DataFrame(
        db.fetch_all(conn, "run_claims", dict(run_id=run_id)),
        columns=[
            "step_key",
            "attempt",
            "worker_id",
            "host",
            "started_at",
            "finished_at",
            "outcome",
            "lease_until",
        ],
    )
    frame.insert(1, "step", frame["step_key"].map(_step_of))
    return frame


@takes_run_id  # the id, or a unique prefix of it
def events_frame(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """The run's step done events with the time the engine stored them (first write wins), oldest
    first; an event only awaited so far is not among them."""
    keys = sorted({e["step_key"] for e in _step_entries(conn, run_id)})
    events = db.fetch_all(conn, "engine_events", dict(names=[names.done_event(k) for k in keys]))
    prefix = names.done_event("")
    # As in engine_debug: an event awaited before it was emitted is a placeholder row at the epoch.
    rows = [
        {
            "step_key": e["event_name"].removeprefix(prefix),
            "emitted_at": e["emitted_at"],
            "payload": e["payload"],
        }
        for e in events
        if e["emitted_at"].year > 1970
    ]
    frame = pd.DataFrame(rows, columns=["step_key", "emitted_at", "payload"])
    frame.insert(1, "step", frame["step_key"].map(_step_of))
    frame.insert(2, "try", frame["step_key"].map(lambda key: names.split_step_key(key)[2]))
    return frame


@takes_run_id  # the id, or a unique prefix of it
def workers_frame(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """Conductor and bot processes alive at some point during the run (or just before it), oldest
    first; `alive` is their liveness lock."""
    run = db.fetch_one(conn, "get_run", dict(run_id=run_id))
    if run is None:
        raise thread_entries.RunNotFound(f"no run {run_id}")
    end = run["finished_at"] or db.fetch_row(conn, "db_now")["now"]
    rows = [
        w
        for w in reversed(list_workers(conn))  # newest first there
        if w["started_at"] <= end
        and (w["alive"] or w["last_beat_at"] >= run["created_at"] - BEAT_WINDOW)
    ]
    return pd.DataFrame(rows, columns=["id", "kind", "pid", "started_at", "last_beat_at", "alive"])


@takes_run_id  # the id, or a unique prefix of it
def engine_frame(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """The engine's own rows for the run (one per conductor attempt): state, lease holder, wake-up
    (available_at; empty while the run awaits an event, which the engine stores as infinity)."""
    rows = db.fetch_all(conn, "engine_attempts", dict(run_id=run_id))
    frame = pd.DataFrame(
        rows,
        columns=[
            "run_id",
            "attempt",
            "state",
            "claimed_by",
            "claim_expires_at",
            "available_at",
            "wake_event",
            "started_at",
            "completed_at",
            "failed_at",
            "failure_reason",
        ],
    )
    return frame.rename(columns={"run_id": "engine_run"})


def schedule_slots_frame(conn: psycopg.Connection[Any], workflow: str) -> pd.DataFrame:
    """A scheduled workflow's slot rows, oldest first: the slot, the run it started, and how many
    earlier missed slots it stands for (catch_up)."""
    return pd.DataFrame(
        db.fetch_all(conn, "frame_schedule_slots", dict(workflow=workflow)),
        columns=["slot", "run_id", "skipped"],
    )


@takes_run_id  # the id, or a unique prefix of it
def timeline_frame(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """Bars for a timeline: process liveness (start to last heartbeat, or now while alive), step
    tries (sent to ended) and bot attempts (claimed to finished). Open bars end at now."""
    run = run_view(conn, run_id, thread_limit=1)
    now = db.fetch_row(conn, "db_now")["now"]
    run_start = run.created_at
    run_end = run.finished_at or now
    rows: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    workers = workers_frame(conn, run_id).sort_values(["kind", "started_at"], key=_conductors_first)
    for w in workers.to_dict("records"):
        counts[w["kind"]] = counts.get(w["kind"], 0) + 1
        start = max(w["started_at"], run_start - MARGIN)
        finish = min(now if w["alive"] else w["last_beat_at"], run_end + MARGIN)
        if finish >= start:
            rows.append(
                dict(
                    lane=f"{w['kind']} {counts[w['kind']]} (pid {w['pid']})",
                    kind=f"{w['kind']} alive",
                    start=start,
                    finish=finish,
                    outcome="alive" if w["alive"] else "dead",
                    detail="alive now"
                    if w["alive"]
                    else f"last heartbeat {w['last_beat_at']:%H:%M:%S.%f}",
                )
            )
    attempts = attempts_frame(conn, run_id).to_dict("records")
    for t in step_tries_frame(conn, run_id).to_dict("records"):  # each step, then its attempts
        ended = t["ended_at"] if pd.notna(t["ended_at"]) else None
        lane = step_lane(t["step"], t["try"])
        rows.append(
            dict(
                lane=lane,
                kind="step",
                start=t["sent_at"],
                finish=ended or now,
                outcome=t["outcome"] or "open",
                detail=f"step key {t['step_key']}",
            )
        )
        for a in (a for a in attempts if a["step_key"] == t["step_key"]):
            finished = a["finished_at"] if pd.notna(a["finished_at"]) else None
            rows.append(
                dict(
                    lane=f"{lane} · attempt {a['attempt']}",
                    kind="attempt",
                    start=a["started_at"],
                    finish=finished or now,
                    outcome=a["outcome"] or AttemptOutcome.RUNNING,
                    detail=f"bot process {a['worker_id']}",
                )
            )
    frame = pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
    for column in ("start", "finish"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def step_lane(step: str, try_no: int) -> str:
    return f"step {step}" if try_no == 1 else f"step {step} (try {try_no})"


def timeline_figure(
    conn: psycopg.Connection[Any], run_id: str, marks: dict[str, datetime] | None = None
) -> Any:
    """A Plotly timeline of timeline_frame, with each done event as a diamond on its step's lane
    and `marks` (label -> time, e.g. when a process was killed) as vertical lines."""
    import plotly.express as px  # only notebooks draw; the rest of engine_adapter never needs it

    frame = timeline_frame(conn, run_id)
    lanes = list(dict.fromkeys(frame["lane"]))
    fig = px.timeline(
        frame,
        x_start="start",
        x_end="finish",
        y="lane",
        color="kind",
        hover_data=["outcome", "detail"],
        title=f"Run {run_id}",
    )
    fig.update_yaxes(categoryorder="array", categoryarray=lanes, autorange="reversed", title=None)
    events = events_frame(conn, run_id)
    if not events.empty:
        fig.add_scatter(
            x=pd.to_datetime(events["emitted_at"], utc=True),
            y=[step_lane(s, t) for s, t in zip(events["step"], events["try"], strict=True)],
            mode="markers",
            name="done event",
            marker=dict(symbol="diamond", size=11, color="black"),
        )
    for label, at in (marks or {}).items():
        at = pd.Timestamp(at)
        at = at.tz_convert("UTC").tz_localize(None) if at.tzinfo else at  # like the bars: UTC
        fig.add_shape(
            type="line",
            x0=at,
            x1=at,
            yref="paper",
            y0=0,
            y1=1,
            line=dict(color="crimson", dash="dash"),
        )
        fig.add_annotation(
            x=at,
            y=1,
            yref="paper",
            text=label,
            showarrow=False,
            yanchor="bottom",
            font=dict(color="crimson"),
        )
    return fig


def _step_entries(conn: psycopg.Connection[Any], run_id: str) -> list[dict[str, Any]]:
    """The run's thread entries that belong to a step try, in order."""
    entries = db.fetch_all(conn, "run_entries", dict(run_id=run_id, after=0, limit=ENTRY_LIMIT))
    return [e for e in entries if e["step_key"] is not None]


def _conductors_first(column: pd.Series) -> pd.Series:
    return (
        column.map(lambda kind: 0 if kind == "conductor" else 1)
        if column.name == "kind"
        else column
    )


def _step_of(key: Any) -> str | None:
    return (
        names.split_step_key(key)[1] if isinstance(key, str) else None
    )  # missing keys read as NaN
