"""The one read model: the CLI, the console and the notebooks all read runs through here."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from . import db, threads
from .workers import list_workers

RUN_STATES = (
    "pending",
    "queued",
    "running",
    "sleeping",
    "waiting",
    "completed",
    "failed",
    "cancelled",
)
FINISHED = ("completed", "failed", "cancelled")


def run_state(run: dict[str, Any], task: dict[str, Any] | None) -> str:
    """Our state of record, overridden where the engine itself ended the task."""
    if task and task["state"] in ("failed", "cancelled") and run["state"] not in FINISHED:
        return task["state"]
    return run["state"]


def show_run(
    conn: psycopg.Connection[Any], run_id: str, *, thread_limit: int = 1000
) -> dict[str, Any]:
    run = db.fetch_one(conn, "get_run", dict(run_id=run_id))
    if run is None:
        raise threads.RunNotFound(f"no run {run_id}")
    task = db.fetch_one(conn, "engine_task", dict(run_id=run_id))
    rows = db.fetch_all(conn, "run_checkpoints", dict(run_id=run_id))
    checkpoints = {r["checkpoint_name"]: r["state"] for r in rows}
    written_at = {r["checkpoint_name"]: r["updated_at"] for r in rows}
    claims = db.fetch_all(conn, "run_claims", dict(run_id=run_id))
    state = run_state(run, task)
    entries = db.fetch_all(conn, "run_entries", dict(run_id=run_id, after=0, limit=thread_limit))
    return {
        "run_id": str(run["run_id"]),
        "workflow": run["workflow"],
        "workflow_version": run["workflow_version"],
        "state": state,
        "trigger": run["trigger"],
        "payload": run["payload"],
        "created_at": run["created_at"].isoformat(),
        "finished_at": run["finished_at"].isoformat() if run["finished_at"] else None,
        "wake_at": run["wake_at"].isoformat() if run["wake_at"] and state == "sleeping" else None,
        "await_key": run["await_key"] if run["awaiting"] else None,
        "gate": _gate_view(run),
        "steps": step_statuses(run, state, checkpoints, claims, written_at),
        "thread": [
            {
                "seq": e["seq"],
                "author_kind": e["author_kind"],
                "author": e["author"],
                "kind": e["kind"],
                "step_key": e["step_key"],
                "text": e["text"],
                "created_at": e["created_at"].isoformat(),
            }
            for e in entries
        ],
    }


def _gate_view(run: dict[str, Any]) -> dict[str, Any] | None:
    gate = threads.current_gate(run)
    if gate is None:
        return None
    return {
        "step": gate["id"],
        "key": run["await_key"],
        "accept": gate.get("accept"),
        "approvers": gate.get("approvers") or [],
        "on_timeout": gate.get("on_timeout"),
    }


def step_statuses(
    run: dict[str, Any],
    state: str,
    checkpoints: dict[str, Any],
    claims: list[dict[str, Any]],
    written_at: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Each step's status, attempts, output and times (started: its first SEND; finished: its
    result)."""
    written_at = written_at or {}
    steps = run["recipe"]["steps"]
    ids = [s["id"] for s in steps]
    current = ids.index(run["current_step"]) if run["current_step"] in ids else -1
    out = []
    for i, step in enumerate(steps):
        kind = next(
            k
            for k in ("run_command", "dispatch_task", "sleep", "sleep_until", "human_gate")
            if k in step
        )
        tries = [
            int(n.rsplit(":", 1)[1]) for n in checkpoints if n.startswith(f"send:{step['id']}:")
        ]
        last_try = max(tries, default=0)
        result = checkpoints.get(f"done:{step['id']}:{last_try}") or checkpoints.get(
            f"done-late:{step['id']}:{last_try}"
        )
        attempts = sum(1 for c in claims if c["step_key"].rsplit(":", 2)[1] == step["id"])
        status, output = "pending", None
        if kind == "human_gate" and result:
            approved = result.get("decision") in ("approve", "reply") or (
                result.get("decision") == "timeout" and step.get("on_timeout") == "approve"
            )
            status, output = ("completed" if approved else "failed"), result.get("text")
        elif result:
            status, output = result.get("status", "completed"), result.get("output")
        elif kind.startswith("sleep") and last_try and (i < current or state == "completed"):
            status, output = (
                "completed",
                checkpoints.get(f"send:{step['id']}:{last_try}", {}).get("wake_at"),
            )
        elif i == current and state not in ("completed", "cancelled"):
            status = {
                "running": "active",
                "sleeping": "sleeping",
                "waiting": "gate",
                "failed": "failed",
                "pending": "pending",
                "queued": "pending",
            }.get(state, "active")
        elif state == "cancelled" and i >= current:
            status = "skipped"
        if status == "failed" and i == current and state == "failed" and not output:
            output = _failure_reason(checkpoints, step["id"], last_try)
        first_send = written_at.get(f"send:{step['id']}:1")
        finished = written_at.get(f"done:{step['id']}:{last_try}") or written_at.get(
            f"done-late:{step['id']}:{last_try}"
        )
        if kind.startswith("sleep") and status == "completed" and output:
            finished = datetime.fromisoformat(output)  # a sleep ends at its wake time
        out.append(
            {
                "id": step["id"],
                "kind": kind,
                "status": status,
                "attempts": attempts,
                "tries": last_try,
                "output": output,
                "started_at": first_send.isoformat() if first_send else None,
                "finished_at": finished.isoformat()
                if finished and status in ("completed", "failed")
                else None,
            }
        )
    return out


def _failure_reason(checkpoints: dict[str, Any], step_id: str, try_no: int) -> str | None:
    sent = checkpoints.get(f"send:{step_id}:{try_no}") or {}
    return sent.get("error")


def list_runs(
    conn: psycopg.Connection[Any],
    *,
    workflow: str | None = None,
    state: str | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    if state is not None and state not in RUN_STATES:
        raise ValueError(f"state must be one of {', '.join(RUN_STATES)}, not {state!r}")
    return db.fetch_all(conn, "list_runs", dict(workflow=workflow, state=state, limit=limit))


def health(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    workers = list_workers(conn)
    counts = db.fetch_one(conn, "health_counts")

    def view(kind: str) -> list[dict[str, Any]]:
        return [
            {
                "id": w["id"],
                "host": w["host"],
                "pid": w["pid"],
                "last_beat_age_s": round(w["last_beat_age_s"], 1),
                "alive": w["alive"],
                "sandbox": w.get("sandbox"),
            }
            for w in workers
            if w["kind"] == kind and (w["alive"] or w["last_beat_age_s"] < 3600)
        ]

    conductors, bots = view("conductor"), view("bots")
    if not any(c["alive"] for c in conductors):
        status = "down"
    elif counts["runnable_unclaimed"] or (
        counts["instructions_waiting"] and not any(b["alive"] for b in bots)
    ):
        status = "degraded"
    else:
        status = "ok"
    # Said plainly wherever health is shown: which live bot processes run steps unsandboxed.
    unsandboxed = [
        b["id"] for b in bots if b["alive"] and (b["sandbox"] or "").startswith("UNSANDBOXED")
    ]
    return {
        "status": status,
        "conductors": conductors,
        "bots": bots,
        "unsandboxed_bots": unsandboxed,
        "runnable_unclaimed": counts["runnable_unclaimed"],
        "instructions_waiting": counts["instructions_waiting"],
    }


# -- what the console and notebooks read besides a run's summary ---------------------------------
ENTRY_CUT = 2000  # longer entry texts arrive cut; the rest is loaded on demand


def thread_entries(
    conn: psycopg.Connection[Any],
    run_id: str,
    *,
    after: int = 0,
    limit: int = 200,
    cut: int = ENTRY_CUT,
) -> list[dict[str, Any]]:
    """Entries after a seq; or, with after < 0, the last `limit` entries (a thread opens at its
    end)."""
    if after < 0:
        return db.fetch_all(conn, "thread_tail", dict(run_id=run_id, limit=limit, cut=cut))
    return db.fetch_all(conn, "thread_page", dict(run_id=run_id, after=after, limit=limit, cut=cut))


def entry_text(conn: psycopg.Connection[Any], run_id: str, seq: int) -> str:
    row = db.fetch_one(conn, "entry_text", dict(run_id=run_id, seq=seq))
    if row is None:
        raise threads.RunNotFound(f"run {run_id} has no entry {seq}")
    return row["text"]


def open_gates(conn: psycopg.Connection[Any], limit: int = 200) -> list[dict[str, Any]]:
    """Every run waiting on a human, oldest first."""
    rows = db.fetch_all(conn, "open_gates", dict(limit=limit))
    for row in rows:
        row["run_id"] = str(row["run_id"])
    return rows


def workers_overview(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Every registered conductor and bot process with what it holds now."""
    return db.fetch_all(conn, "workers_in_hand")


def runnable_unclaimed(conn: psycopg.Connection[Any], limit: int = 50) -> list[dict[str, Any]]:
    rows = db.fetch_all(conn, "runnable_unclaimed", dict(limit=limit))
    for row in rows:
        row["run_id"] = str(row["run_id"])
    return rows


def conductor_beat(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The heartbeat badge's inputs: health plus the newest conductor beat."""
    beat = db.fetch_one(conn, "last_conductor_beat")
    return health(conn) | {
        "last_beat_at": beat["last_beat_at"],
        "db_now": db.fetch_one(conn, "db_now")["now"],
    }
