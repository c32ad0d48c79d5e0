"""The one read model: the CLI, the console and the notebooks all read runs through here."""

from __future__ import annotations

from typing import Any

import psycopg

from . import db, threads
from .workers import list_workers

RUN_STATES = ("pending", "queued", "running", "sleeping", "waiting", "completed", "failed", "cancelled")
FINISHED = ("completed", "failed", "cancelled")


def run_state(run: dict[str, Any], task: dict[str, Any] | None) -> str:
    """Our state of record, overridden where the engine itself ended the task."""
    if task and task["state"] in ("failed", "cancelled") and run["state"] not in FINISHED:
        return task["state"]
    return run["state"]


def show_run(conn: psycopg.Connection[Any], run_id: str, *, thread_limit: int = 1000) -> dict[str, Any]:
    run = db.fetch_one(conn, "get_run", dict(run_id=run_id))
    if run is None:
        raise threads.RunNotFound(f"no run {run_id}")
    task = db.fetch_one(conn, "engine_task", dict(run_id=run_id))
    checkpoints = {r["checkpoint_name"]: r["state"] for r in db.fetch_all(conn, "run_checkpoints", dict(run_id=run_id))}
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
        "steps": step_statuses(run, state, checkpoints, claims),
        "thread": [
            {"seq": e["seq"], "author_kind": e["author_kind"], "author": e["author"], "kind": e["kind"],
             "step_key": e["step_key"], "text": e["text"], "created_at": e["created_at"].isoformat()}
            for e in entries
        ],
    }


def step_statuses(run: dict[str, Any], state: str, checkpoints: dict[str, Any],
                  claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    steps = run["recipe"]["steps"]
    ids = [s["id"] for s in steps]
    current = ids.index(run["current_step"]) if run["current_step"] in ids else -1
    out = []
    for i, step in enumerate(steps):
        kind = next(k for k in ("run_command", "dispatch_task", "sleep", "sleep_until", "human_gate") if k in step)
        tries = [int(n.rsplit(":", 1)[1]) for n in checkpoints if n.startswith(f"send:{step['id']}:")]
        last_try = max(tries, default=0)
        result = (checkpoints.get(f"done:{step['id']}:{last_try}")
                  or checkpoints.get(f"done-late:{step['id']}:{last_try}"))
        attempts = sum(1 for c in claims if c["step_key"].rsplit(":", 2)[1] == step["id"])
        status, output = "pending", None
        if kind == "human_gate" and result:
            approved = result.get("decision") in ("approve", "reply") or (
                result.get("decision") == "timeout" and step.get("on_timeout") == "approve")
            status, output = ("completed" if approved else "failed"), result.get("text")
        elif result:
            status, output = result.get("status", "completed"), result.get("output")
        elif kind.startswith("sleep") and last_try and (i < current or state == "completed"):
            status, output = "completed", checkpoints.get(f"send:{step['id']}:{last_try}", {}).get("wake_at")
        elif i == current and state not in ("completed", "cancelled"):
            status = {"running": "active", "sleeping": "sleeping", "waiting": "gate",
                      "failed": "failed", "pending": "pending", "queued": "pending"}.get(state, "active")
        elif state == "cancelled" and i >= current:
            status = "skipped"
        if status == "failed" and i == current and state == "failed" and not output:
            output = _failure_reason(checkpoints, step["id"], last_try)
        out.append({"id": step["id"], "kind": kind, "status": status, "attempts": attempts,
                    "tries": last_try, "output": output})
    return out


def _failure_reason(checkpoints: dict[str, Any], step_id: str, try_no: int) -> str | None:
    sent = checkpoints.get(f"send:{step_id}:{try_no}") or {}
    return sent.get("error")


def list_runs(conn: psycopg.Connection[Any], *, workflow: str | None = None, state: str | None = None,
              limit: int = 50) -> list[dict[str, Any]]:
    if state is not None and state not in RUN_STATES:
        raise ValueError(f"state must be one of {', '.join(RUN_STATES)}, not {state!r}")
    return db.fetch_all(conn, "list_runs", dict(workflow=workflow, state=state, limit=limit))


def health(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    workers = list_workers(conn)
    counts = db.fetch_one(conn, "health_counts")

    def view(kind: str) -> list[dict[str, Any]]:
        return [{"id": w["id"], "host": w["host"], "pid": w["pid"],
                 "last_beat_age_s": round(w["last_beat_age_s"], 1), "alive": w["alive"]}
                for w in workers if w["kind"] == kind and (w["alive"] or w["last_beat_age_s"] < 3600)]

    conductors, bots = view("conductor"), view("bots")
    if not any(c["alive"] for c in conductors):
        status = "down"
    elif counts["runnable_unclaimed"] or (counts["instructions_waiting"] and not any(b["alive"] for b in bots)):
        status = "degraded"
    else:
        status = "ok"
    return {"status": status, "conductors": conductors, "bots": bots,
            "runnable_unclaimed": counts["runnable_unclaimed"],
            "instructions_waiting": counts["instructions_waiting"]}
