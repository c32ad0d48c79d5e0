"""Absurd's internals for one run, for the console's debug pane (the only surface that shows
engine words: task, attempt rows, checkpoints, events, waits).

The crash-resume story: every checkpoint records the engine run (attempt) that wrote it. An
attempt executed the checkpoints it owns and replayed, from the journal, those older attempts wrote.
"""

from __future__ import annotations

from typing import Any

import psycopg

from engine_adapter.model import names
from engine_adapter.model.vocab import TaskState
from engine_adapter.store import db


def run_debug(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any]:
    task = db.fetch_one(conn, "engine_task_row", dict(run_id=run_id))
    attempts = db.fetch_all(conn, "engine_attempts", dict(run_id=run_id))
    checkpoints = db.fetch_all(conn, "engine_checkpoints", dict(run_id=run_id))
    waits = db.fetch_all(conn, "engine_waits", dict(run_id=run_id))
    claims = db.fetch_all(conn, "run_claims", dict(run_id=run_id))
    attempt_of = {a["run_id"]: a["attempt"] for a in attempts}
    keys = sorted({c["step_key"] for c in claims} | set(_sent_keys(run_id, checkpoints)))
    event_names = [names.done_event(k) for k in keys] + [names.retry_event(k) for k in keys]
    event_names += [w["event_name"] for w in waits]
    events = db.fetch_all(conn, "engine_events", dict(names=event_names))
    awaited = {w["event_name"] for w in waits}
    return {
        "task": task["task"] if task else None,
        "attempts": [_attempt_view(a, checkpoints) for a in attempts],
        "decisions": _decisions(checkpoints),
        "checkpoints": [
            {
                "name": c["checkpoint_name"],
                "attempt": attempt_of.get(c["owner_run_id"]),
                "status": c["status"],
                "updated_at": c["updated_at"],
                "state": c["state"],
            }
            for c in checkpoints
        ],
        # Absurd keeps a placeholder row (at the epoch, no payload) for an event awaited before it
        # was emitted: shown as awaited, not as emitted.
        "events": [
            {
                "name": e["event_name"],
                "payload": e["payload"],
                "emitted": e["emitted_at"].year > 1970,
                "emitted_at": e["emitted_at"] if e["emitted_at"].year > 1970 else None,
                "awaited_now": e["event_name"] in awaited,
            }
            for e in events
        ],
        "awaiting": [
            {
                "event": w["event_name"],
                "checkpoint": w["step_name"],
                "timeout_at": w["timeout_at"],
                "since": w["created_at"],
            }
            for w in waits
        ],
        "sleep_until": next(
            (a["available_at"] for a in reversed(attempts) if a["state"] == TaskState.SLEEPING),
            None,
        ),
        "bot_attempts": [
            {
                "step_key": c["step_key"],
                "attempt": c["attempt"],
                "worker": c["worker_id"],
                "host": c["host"],
                "started_at": c["started_at"],
                "finished_at": c["finished_at"],
                "outcome": c["outcome"],
                "lease_until": c["lease_until"],
            }
            for c in claims
        ],
    }


def _sent_keys(run_id: str, checkpoints: list[dict[str, Any]]) -> list[str]:
    out = []
    for c in checkpoints:
        parsed = names.parse_checkpoint(c["checkpoint_name"])
        if parsed and parsed[0] == names.SEND and parsed[2] is not None:
            out.append(names.step_key(run_id, parsed[1], parsed[2]))
    return out


# Checkpoints that record a decision the run took: a replay reads them and takes the same path.
_DECISIONS = {
    names.DECIDE: "condition",
    names.UNTIL: "until",
    names.ITEMS: "foreach list",
    names.WINNER: "first finished",
    names.CARRIED: "carried over",
}


def _decisions(checkpoints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for c in checkpoints:
        parsed = names.parse_checkpoint(c["checkpoint_name"])
        if parsed is None or parsed[0] not in _DECISIONS or parsed[3] is not None:
            continue
        state = c["state"] if isinstance(c["state"], dict) else {}
        if "error" in state:
            value = f"error: {state['error']}"
        elif parsed[0] in (names.DECIDE, names.UNTIL):
            value = f"{state.get('value')}" + (f" ({state['why']})" if state.get("why") else "")
        elif parsed[0] == names.ITEMS:
            value = f"{len(state.get('items') or [])} items"
        elif parsed[0] == names.WINNER:
            value = f"branch {state.get('branch')} ({state.get('status')})"
        else:
            value = f"from run {state.get('from')}"
        out.append(
            {
                "what": _DECISIONS[parsed[0]],
                "step": parsed[1],
                "try": parsed[2],
                "value": value,
                "at": c["updated_at"],
            }
        )
    return out


def _attempt_view(attempt: dict[str, Any], checkpoints: list[dict[str, Any]]) -> dict[str, Any]:
    """Which checkpoints this attempt executed itself and which it found written by earlier ones."""
    executed = [c["checkpoint_name"] for c in checkpoints if c["owner_run_id"] == attempt["run_id"]]
    started = attempt["started_at"]
    replayed = [
        c["checkpoint_name"]
        for c in checkpoints
        if c["owner_run_id"] != attempt["run_id"]
        and started is not None
        and c["updated_at"] <= started
    ]
    return {
        "attempt": attempt["attempt"],
        "state": attempt["state"],
        "claimed_by": attempt["claimed_by"],
        "lease_expires_at": attempt["claim_expires_at"],
        "started_at": attempt["started_at"],
        "available_at": attempt["available_at"],
        "wake_event": attempt["wake_event"],
        "failure_reason": attempt["failure_reason"],
        "executed": executed,
        "replayed": replayed,
    }
