"""The global pause switch: `threadline pause` refuses new runs with a clear message, and runs in
flight (with the child runs they start) go on; `threadline unpause` lifts it."""

from __future__ import annotations

from typing import Any

import psycopg

from engine_adapter.access.authorization import Action, transaction
from engine_adapter.model.identity import Actor
from engine_adapter.store import db


def state(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    """The switch: who paused, when and why; None when runs start."""
    return db.fetch_one(conn, "pause_state")


def pause(conn: psycopg.Connection[Any], actor: Actor, reason: str | None = None) -> None:
    with transaction(conn, actor, Action.PAUSE, detail={"paused": True}):
        conn.execute(db.q("set_pause"), dict(reason=reason, actor=actor.label, via=actor.via))


def unpause(conn: psycopg.Connection[Any], actor: Actor | None = None) -> bool:
    """Lift the switch; False if it was not set."""
    with transaction(conn, actor, Action.PAUSE, detail={"paused": False}):
        return db.fetch_one(conn, "clear_pause") is not None


def describe(switch: dict[str, Any]) -> str:
    why = f": {switch['reason']}" if switch["reason"] else ""
    return (
        f"Threadline is paused (by {switch['paused_by']} at "
        f"{switch['paused_at']:%Y-%m-%d %H:%M:%S %Z}{why}); new runs are refused and runs in "
        "flight go on. `threadline unpause` lifts it."
    )
