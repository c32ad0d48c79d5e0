"""Following a run for the runtime contract: each change said as an NDJSON event, until the run
stops or pauses at a gate (its own, or one in a run it started)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from engine_adapter.model import domain
from engine_adapter.model.vocab import EnvelopeStatus, RunState
from engine_adapter.read.read_model import show_run
from engine_adapter.store import db

POLL_S = 0.1
STATUS = {  # run state -> envelope status, where the run has stopped
    RunState.COMPLETED: EnvelopeStatus.OK,
    RunState.FAILED: EnvelopeStatus.FAILED,
    RunState.CANCELLED: EnvelopeStatus.CANCELLED,
}

Emit = Callable[[dict[str, Any]], None]
# A step in one of these has started; one in these has ended, said as this event.
STARTED = frozenset({domain.ACTIVE, domain.SLEEPING, domain.GATE, domain.WAITING})
ENDED = {
    domain.COMPLETED: "step.completed",
    domain.FAILED: "step.failed",
    domain.CANCELLED: "step.cancelled",
    domain.SKIPPED: "step.skipped",
}


@dataclass
class Follower:
    """Follows a run, saying each change as an NDJSON event, until it stops or pauses."""

    conn: psycopg.Connection[Any]
    run_id: str
    emit: Emit
    seen: dict[str, str] = field(default_factory=dict)  # step path -> last status said
    started: dict[str, int] = field(default_factory=dict)  # step path -> last attempt started
    gate: str | None = None

    def follow(self, deadline: float | None) -> dict[str, Any]:
        while True:
            view = self.with_gate_below(show_run(self.conn, self.run_id, thread_limit=0))
            self.say(view)
            if view["state"] in STATUS or view["gate"] is not None:
                return view
            if deadline is not None and time.monotonic() >= deadline:
                return view
            time.sleep(POLL_S)

    def with_gate_below(self, view: dict[str, Any]) -> dict[str, Any]:
        """The run's view, paused at a gate of a run it started (a branch, an item, a
        sub-workflow) when it waits at none of its own: `gate_run_id` names that run."""
        view = dict(view, gate_run_id=view["run_id"] if view["gate"] is not None else None)
        if view["gate"] is None and view["state"] not in STATUS:
            below = db.fetch_one(self.conn, "gate_below", dict(run_id=view["run_id"]))
            if below is not None:
                child = show_run(self.conn, str(below["run_id"]), thread_limit=0)
                view["gate"], view["gate_run_id"] = child["gate"], child["run_id"]
        return view

    def say(self, view: dict[str, Any]) -> None:
        for node in view["steps"]:
            self.say_started(node)
            status = node["status"]
            if self.seen.get(node["path"]) == status:
                continue
            self.seen[node["path"]] = status
            event = ENDED.get(status)
            if event:
                self.emit(self.event(event, step=node["id"], attempt=node["attempts"]))
        gate = (view["gate"] or {}).get("key")
        if gate and gate != self.gate:
            self.emit(self.event("approval.required", step=view["gate"]["step"]))
        self.gate = gate

    def say_started(self, node: dict[str, Any]) -> None:
        """step.started once per attempt of a step that ran, before how it ended: a step that
        starts and ends between two looks is still said to have started."""
        status = node["status"]
        ran = status in STARTED or (
            status in ENDED and status != domain.SKIPPED and node["started_at"] is not None
        )
        attempt = max(node["attempts"] or 0, 1)
        if ran and self.started.get(node["path"], 0) < attempt:
            self.started[node["path"]] = attempt
            self.emit(self.event("step.started", step=node["id"], attempt=attempt))

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "run_id": self.run_id, **fields, "ts": _now()}


def _now() -> str:
    return datetime.now(UTC).isoformat()
