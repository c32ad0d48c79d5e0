"""The one door every run comes through."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import db, threads
from .settings import HANDLER_NAME, HANDLER_VERSION, QUEUE
from .workflows import get_workflow

# Conductor attempts: each conductor crash while it holds a run burns one; step failures never do.
CONDUCTOR_MAX_ATTEMPTS = 50
CONDUCTOR_RETRY = {"kind": "exponential", "base_seconds": 1, "factor": 2, "max_seconds": 30}


class SpawnError(ValueError):
    pass


@dataclass(frozen=True)
class Spawned:
    run_id: str
    created: bool


def spawn(
    conn: psycopg.Connection[Any],
    workflow: str,
    payload: Any = None,
    *,
    trigger: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Spawned:
    """Snapshot the workflow's recipe and the payload into a new run, in one transaction.

    A repeated idempotency key returns the existing run with created=False.
    """
    payload = {} if payload is None else payload
    if not isinstance(payload, dict):
        raise SpawnError(f"payload must be a JSON object, not {type(payload).__name__}")
    trigger = trigger or {"kind": "manual"}
    with conn.transaction():
        wf = get_workflow(conn, workflow)
        if not wf["enabled"]:
            raise SpawnError(f"workflow {workflow!r} is disabled")
        params = {"v": HANDLER_VERSION, "workflow": workflow, "recipe": wf["recipe"], "payload": payload}
        options: dict[str, Any] = {"max_attempts": CONDUCTOR_MAX_ATTEMPTS, "retry_strategy": CONDUCTOR_RETRY}
        if idempotency_key:
            options["idempotency_key"] = f"spawn:{idempotency_key}"
        task = db.fetch_one(conn, "spawn_task", dict(
            queue=QUEUE, task=HANDLER_NAME, params=Jsonb(params), options=Jsonb(options)))
        run_id = str(task["task_id"])
        if not task["created"]:
            return Spawned(run_id, created=False)
        conn.execute(db.q("insert_run_thread"), dict(
            run_id=run_id, workflow=workflow, version=wf["version"], hash=wf["hash"],
            recipe=Jsonb(wf["recipe"]), payload=Jsonb(payload), bot=wf["bot"],
            trigger=Jsonb(trigger), idempotency_key=idempotency_key))
        threads.append(conn, run_id, "system", "threadline", "note", _opening_line(wf, payload, trigger),
                       dedupe_key="opened", data={"trigger": trigger, "payload": payload})
        db.notify(conn, run_id, "spawn")
    return Spawned(run_id, created=True)


def _opening_line(wf: dict[str, Any], payload: dict[str, Any], trigger: dict[str, Any]) -> str:
    by = trigger.get("kind", "manual") + (f" by {trigger['caller']}" if trigger.get("caller") else "")
    steps = ", ".join(s["id"] for s in wf["recipe"]["steps"])
    text = f"Run of {wf['slug']} v{wf['version']} started ({by}). Steps: {steps}."
    if payload:
        text += f"\nPayload: {json.dumps(payload, ensure_ascii=False)}"
    return text
