"""Operator commands on runs: cancel, retry and a hand-emitted debug event (replies and decisions
live in gates.py, the run-state writes they build on in run_state.py)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine_adapter.access import authorization
from engine_adapter.catalog import bot_config
from engine_adapter.model import names
from engine_adapter.model.domain import ENDED, FINISHED
from engine_adapter.model.errors import Conflict
from engine_adapter.model.identity import Actor
from engine_adapter.model.settings import QUEUE
from engine_adapter.model.vocab import EntryKind, RunState, TaskState
from engine_adapter.runs import child_runs, run_limits, run_state, thread_entries
from engine_adapter.store import db, traces


class CommandRefused(Conflict):
    """The run is not in a state the command applies to; nothing was written."""


def cancel_run(
    conn: psycopg.Connection[Any], run_id: str, actor: Actor, reason: str | None = None
) -> None:
    """End the run cancelled; a running command is stopped by its bot (SIGTERM, then SIGKILL).
    Cancelling a run tree takes its runs' locks as it walks it, so two cancels of crossing trees
    can deadlock: Postgres aborts one, and that one is tried again."""
    db.retrying_deadlocks(conn, lambda: _cancel(conn, run_id, actor, reason))
    # The run ends here, not in a conductor's handler (its engine task is cancelled): its trace's
    # root span goes from the process that cancelled it, when that process sends traces.
    if traces.start("threadline-cli"):
        traces.run_ended(conn, run_id, RunState.CANCELLED)


def _cancel(conn: psycopg.Connection[Any], run_id: str, actor: Actor, reason: str | None) -> None:
    with authorization.change(conn, actor, authorization.Action.CANCEL, run_id=run_id):
        run = run_state.lock_run(conn, run_id)
        if run["state"] in ENDED or (run["parent_run_id"] and run["state"] in FINISHED):
            raise CommandRefused(f"run {run_id} is already {run['state']}")
        db.fetch_one(conn, "cancel_engine_task", dict(queue=QUEUE, run_id=run_id))
        run_state.set_run_state(
            conn, run_id, RunState.CANCELLED, run["current_step"], run["current_try"]
        )
        text = f"Run cancelled by {actor.label}" + (f": {reason}" if reason else ".")
        thread_entries.by_person(
            conn, run_id, actor, EntryKind.DECISION, text, data={"decision": "cancel"}
        )
        child_runs.cancel_open_children(
            conn, run_id, f"its parent run was cancelled by {actor.label}"
        )
        db.notify(conn, run_id, RunState.CANCELLED)


def retry_run(conn: psycopg.Connection[Any], run_id: str, actor: Actor) -> str:
    """Resume a failed run at its failed step with a new try, under its bot's settings as they
    are now (the thread says which changed); completed steps are not re-run."""
    with authorization.change(conn, actor, authorization.Action.RETRY, run_id=run_id):
        run = run_state.lock_run(conn, run_id)
        task = db.fetch_one(conn, "engine_task", dict(run_id=run_id))
        if task and task["state"] == TaskState.FAILED:
            # The engine itself gave up (a conductor crash loop or a handler bug): retry in place.
            db.fetch_one(conn, "retry_engine_task", dict(queue=QUEUE, run_id=run_id))
            retried, said, data = f"{run_id}:engine", " (engine retry).", {}
        else:
            retried = _retry_failed_step(conn, run, actor)
            said = f": step {run['current_step']} gets try {run['current_try'] + 1}."
            data = {"decision": "retry"}
        changed = _retake_bot_settings(conn, run_id)
        thread_entries.by_person(
            conn,
            run_id,
            actor,
            EntryKind.DECISION,
            f"Retry requested by {actor.label}{said}" + _then(changed),
            data={**data, "bot_settings_changed": changed},
        )
        db.notify(conn, run_id, "retry")
        return retried


def _retry_failed_step(conn: psycopg.Connection[Any], run: dict[str, Any], actor: Actor) -> str:
    """A new try of the failed run's failed step; returns that step's key."""
    run_id = str(run["run_id"])
    if run["state"] != RunState.FAILED:
        raise CommandRefused(f"run {run_id} is {run['state']}, not failed: nothing to retry")
    if run["parent_run_id"]:
        raise CommandRefused(
            f"run {run_id} is part of run {run['parent_run_id']} (step "
            f"{(run['parent'] or {}).get('step')}): retry that run, which re-runs what failed"
        )
    _check_room(conn, run_id, run["workflow"])
    key = names.step_key(run_id, run["current_step"], run["current_try"])
    db.fetch_one(
        conn,
        "emit_retry",
        dict(queue=QUEUE, run_id=run_id, step_key=key, payload=Jsonb(actor.as_record())),
    )
    run_state.set_run_state(conn, run_id, RunState.RUNNING, run["current_step"], run["current_try"])
    return key


def _retake_bot_settings(conn: psycopg.Connection[Any], run_id: str) -> str | None:
    """The retried run takes its bot's settings as they are now, not as its spawn found them: a
    failure that says "configure the bot, then retry" is fixed by `threadline bot apply`. Returns
    what changed, in a sentence (None: nothing)."""
    row = db.fetch_one(conn, "retake_run_agent", dict(run_id=run_id))
    return bot_config.settings_change(row["bot"], row["before"], row["after"]) if row else None


def _then(changed: str | None) -> str:
    return f" It takes its bot's settings as they are now: {changed}." if changed else ""


def _check_room(conn: psycopg.Connection[Any], run_id: str, workflow: str) -> None:
    """A failed run gave up its place under its caps (run_limits.py): resuming it takes one
    again, so it is refused while one of them is full. Under the admission lock, held to commit,
    so a concurrent spawn or retry cannot take the same place."""
    db.fetch_one(conn, "lock_admission", dict(workflow=workflow))
    full = run_limits.Caps.of(conn, run_id).full()
    if full:
        raise CommandRefused(
            f"run {run_id} cannot be retried now: {'; '.join(full)} are active; "
            "retry it when one of them finishes"
        )


def emit_debug_event(
    conn: psycopg.Connection[Any], run_id: str, event: str, payload: Any, actor: Actor
) -> None:
    """Emit an engine event by hand (the debug pane's escape hatch), noted in the run's thread.

    Threadline's own events (a step done, a gate decided, a retry, an admission) are refused: they
    go only through the paths that check who may release them."""
    if not event.strip():
        raise CommandRefused("event name is empty")
    if names.is_own_event(event):
        raise CommandRefused(
            f"event {event!r} is Threadline's own ({names.OWN_EVENT_PREFIX}…): "
            "steps are released by "
            "their bot, gates by a decision (approve/deny/reply), failed runs by retry"
        )
    with authorization.change(
        conn, actor, authorization.Action.DEBUG_EVENT, run_id=run_id, detail={"event": event}
    ):
        run_state.lock_run(conn, run_id)
        db.fetch_one(
            conn, "emit_debug_event", dict(queue=QUEUE, event=event, payload=Jsonb(payload))
        )
        thread_entries.by_person(
            conn,
            run_id,
            actor,
            EntryKind.NOTE,
            f"{actor.label} emitted event {event} (debug).",
            data={"event": event, "payload": payload},
        )
        db.notify(conn, run_id, "thread")
