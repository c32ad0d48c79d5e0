"""Concurrency caps: a workflow's own `max_concurrent_runs`, one over all runs (global) and one per
initiator (who started a run). Only top-level runs count; a run over a cap waits in line, queued,
holding no process (migrations 002 and 021), and starts when a place under every cap is free.

`threadline limits set global 20`, `threadline limits set initiator:alice 3`, `limits remove`,
`limits` (what each holds and how many wait).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from engine_adapter.access.authorization import Action, change
from engine_adapter.model.errors import Invalid
from engine_adapter.model.identity import Actor, name_of_label
from engine_adapter.model.settings import QUEUE
from engine_adapter.model.vocab import TriggerKind
from engine_adapter.store import db

GLOBAL = "global"
INITIATOR = "initiator"


class LimitError(Invalid):
    pass


def initiator_of(trigger: Mapping[str, Any]) -> str:
    """Who a run's initiator cap counts it against: its trigger's caller (the person or token
    of a manual run, a webhook's caller), else how it started ("schedule", "event", ...). A
    caller kept as a label ("root for bob", from a rerun --as) counts against its actor."""
    caller = trigger.get("caller")
    return name_of_label(str(caller)) if caller else str(trigger.get("kind") or TriggerKind.MANUAL)


def parse_scope(scope: str) -> tuple[str, str]:
    """`global` or `initiator:NAME` as (kind, name)."""
    if scope == GLOBAL:
        return GLOBAL, ""
    kind, sep, name = scope.partition(":")
    if kind == INITIATOR and sep and name.strip():
        return INITIATOR, name.strip()
    raise LimitError(f"scope {scope!r} must be 'global' or 'initiator:NAME'")


def scope_label(kind: str, name: str) -> str:
    return GLOBAL if kind == GLOBAL else f"{INITIATOR}:{name}"


def set_limit(conn: psycopg.Connection[Any], scope: str, max_runs: Any, actor: Actor) -> int:
    """Set a cap; raising one (or setting the first) admits what now fits at once. Returns how
    many queued runs it admitted."""
    kind, name = parse_scope(scope)
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise LimitError(f"max runs {max_runs!r} must be a whole number of at least 1")
    with change(conn, actor, Action.SET_LIMITS, detail={"scope": scope, "max_runs": max_runs}):
        conn.execute(
            db.q("set_limit"),
            dict(kind=kind, name=name, max_runs=max_runs, set_by=actor.label),
        )
        return readmit(conn)


def remove_limit(conn: psycopg.Connection[Any], scope: str, actor: Actor) -> tuple[bool, int]:
    """Remove a cap: (whether it existed, how many queued runs that admitted)."""
    kind, name = parse_scope(scope)
    with change(conn, actor, Action.SET_LIMITS, detail={"scope": scope, "removed": True}):
        found = db.fetch_one(conn, "remove_limit", dict(kind=kind, name=name)) is not None
        return found, readmit(conn)


def list_limits(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [
        {**row, "scope": scope_label(row["kind"], row["name"])}
        for row in db.fetch_all(conn, "list_limits")
    ]


def readmit(conn: psycopg.Connection[Any]) -> int:
    """Admit the queued runs that fit now, every workflow's (the reconcile sweep does this too)."""
    admitted = 0
    for row in db.fetch_all(conn, "workflows_with_queued_runs"):
        admitted += db.fetch_row(conn, "admit_queued", dict(queue=QUEUE, workflow=row["workflow"]))[
            "admitted"
        ]
    return admitted


@dataclass(frozen=True)
class Caps:
    """The caps over one run and what holds a place under each (run_caps)."""

    row: Mapping[str, Any]

    @classmethod
    def of(cls, conn: psycopg.Connection[Any], run_id: str) -> Caps:
        return cls(db.fetch_one(conn, "run_caps", dict(run_id=run_id)) or {})

    def full(self) -> list[str]:
        """The caps with no place free, in words ("2 of 2 runs started by alice")."""
        r, out = self.row, []
        if r.get("workflow_max") is not None and r["workflow_active"] >= r["workflow_max"]:
            out.append(
                f"{r['workflow_active']} of {r['workflow_max']} runs of workflow "
                f"{r['workflow']!r} (max_concurrent_runs)"
            )
        if r.get("initiator_max") is not None and r["initiator_active"] >= r["initiator_max"]:
            out.append(
                f"{r['initiator_active']} of {r['initiator_max']} runs started by "
                f"{r['initiator']} (limit initiator:{r['initiator']})"
            )
        if r.get("global_max") is not None and r["global_active"] >= r["global_max"]:
            out.append(f"{r['global_active']} of {r['global_max']} runs in all (limit global)")
        return out

    def waiting_note(self) -> str:
        """Why a queued run waits, for its thread."""
        ahead = self.row.get("ahead") or 0
        line = f"{ahead} ahead of it in line" if ahead else ""
        full = self.full()
        if not full:
            return f"Queued: {line or 'in line'}; it starts when a place is free."
        return (
            f"Queued: {'; '.join(full)} are active{', ' + line if line else ''}; "
            "it starts when a place is free."
        )
