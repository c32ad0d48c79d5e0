"""Events: `threadline emit NAME` starts one run of every enabled workflow with `on_event: NAME`,
and ends every `wait_for_event` step waiting for NAME (with the same `--key`), now or later: a
delivered event is kept, so a run that reaches its wait afterwards finds it (migration 010).

Idempotent per event id: the spawn key is derived from (name, id, workflow), so emitting the same
event again (a retried command, a redelivered message) returns the runs it started the first time.
All of an event's runs are spawned in one transaction: an event starts all of them or none.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine_adapter.access.authorization import Action, transaction
from engine_adapter.model.identity import Actor
from engine_adapter.model.recipe_values import EVENT_NAME
from engine_adapter.model.settings import QUEUE
from engine_adapter.model.vocab import Door, TriggerKind
from engine_adapter.runs import pause
from engine_adapter.runs.spawn import SpawnError, check_payload, spawn
from engine_adapter.store import db

MAX_EVENT_ID = 200


@dataclass(frozen=True)
class EventRun:
    workflow: str
    run_id: str
    created: bool  # False: this event id had started it already


@dataclass(frozen=True)
class Emitted:
    name: str
    event_id: str
    runs: list[EventRun]
    released: list[str] = field(default_factory=list)  # step keys of the waits it ended
    key: str | None = None
    paused: str | None = None  # why no workflow started (the global pause switch is on)


def emit(
    conn: psycopg.Connection[Any],
    name: str,
    payload: Any = None,
    *,
    event_id: str | None = None,
    caller: str | None = None,
    key: str | None = None,
    via: Door = Door.CLI,
    actor: Actor | None = None,
) -> Emitted:
    """Spawn a run per listening workflow and end the waits for it, in one transaction; without
    an id the event gets a fresh one. `key` correlates it with waits (`wait_for_event` `key:`)."""
    if not isinstance(name, str) or not EVENT_NAME.fullmatch(name):
        raise SpawnError(f"event name {name!r} must match {EVENT_NAME.pattern}")
    if event_id is None:
        event_id = str(uuid.uuid4())
    elif not event_id.strip() or len(event_id) > MAX_EVENT_ID:
        raise SpawnError(f"event id {event_id!r} must be 1 to {MAX_EVENT_ID} characters")
    if key is not None and (not key.strip() or len(key) > MAX_EVENT_ID):
        raise SpawnError(f"event key {key!r} must be 1 to {MAX_EVENT_ID} characters")
    payload = check_payload(payload)  # refused even when no workflow listens
    trigger: dict[str, Any] = {"kind": TriggerKind.EVENT, "event": name, "event_id": event_id}
    if caller:
        trigger["caller"] = caller
    runs = []
    with transaction(conn, actor, Action.EMIT_EVENT, detail={"event": name}):
        # Paused: the event starts no run, but still reaches the runs in flight that wait for it.
        switch = pause.state(conn)
        listening = [] if switch else db.fetch_all(conn, "event_workflows", dict(name=name))
        for wf in listening:
            slug = wf["slug"]
            once = f"event:{name}:{event_id}:{slug}"  # one run per event and workflow
            spawned = spawn(conn, slug, payload, trigger=trigger, idempotency_key=once)
            runs.append(EventRun(slug, spawned.run_id, spawned.created))
        released = db.fetch_row(
            conn,
            "deliver_event",
            dict(
                queue=QUEUE,
                name=name,
                key=key,
                event_id=event_id,
                payload=Jsonb(payload),
                source=Jsonb({"caller": caller, "via": via}),
            ),
        )["released"]
    paused = pause.describe(switch) if switch else None
    return Emitted(name, event_id, runs, list(released), key, paused)
