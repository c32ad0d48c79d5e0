"""Where a run stands: its state and `awaiting` (set_run_state), its row lock, and a step's release
(emit_step_done). Operator commands built on these live in commands.py, gates in gates.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine_adapter.model.settings import QUEUE
from engine_adapter.model.vocab import AwaitKind, RunState
from engine_adapter.runs.thread_entries import RunNotFound
from engine_adapter.store import db


def emit_step_done(conn: psycopg.Connection[Any], run_id: str, step_key: str, payload: Any) -> None:
    """Emit the step's done event (first write wins), clear `awaiting` with a compare-and-set
    on the key and wake the conductor. The database checks that the caller may release it:
    a bot only the bot step the run awaits, a human door only a gate it decided."""
    db.fetch_one(
        conn,
        "emit_step_done",
        dict(queue=QUEUE, run_id=run_id, step_key=step_key, payload=Jsonb(payload)),
    )


def set_run_state(
    conn: psycopg.Connection[Any],
    run_id: str,
    state: RunState,
    step: str | None,
    try_no: int | None,
    *,
    await_key: str | None = None,
    await_kind: AwaitKind | None = None,
    wake_at: datetime | None = None,
) -> None:
    """Where the run stands; `awaiting` is armed exactly when an await key is given."""
    conn.execute(
        db.q("set_run_state"),
        {
            "run_id": run_id,
            "state": state,
            "step": step,
            "try": try_no,
            "await_key": await_key,
            "await_kind": await_kind,
            "wake_at": wake_at,
        },
    )


def lock_run(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any]:
    row = db.fetch_one(conn, "lock_run", dict(run_id=run_id))
    if row is None:
        raise RunNotFound(f"no run {run_id}")
    return row
