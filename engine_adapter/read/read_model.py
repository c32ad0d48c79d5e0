"""The one read model: the CLI, the console and the notebooks all read runs through here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any, TypedDict

import psycopg

from engine_adapter.catalog.bot_backends import bots_without_backend
from engine_adapter.model.domain import FINISHED
from engine_adapter.model.vocab import AwaitKind, RunState, TaskState
from engine_adapter.read import step_tree
from engine_adapter.runs import gates, pause
from engine_adapter.runs.thread_entries import RunNotFound
from engine_adapter.store import db
from engine_adapter.store.workers import list_workers


def run_state(run: dict[str, Any], task: dict[str, Any] | None) -> str:
    """Our state of record, overridden where the engine itself ended the task."""
    if (
        task
        and task["state"] in (TaskState.FAILED, TaskState.CANCELLED)
        and run["state"] not in FINISHED
    ):
        return task["state"]
    return run["state"]


def run_facts(conn: psycopg.Connection[Any], run: dict[str, Any]) -> step_tree.RunFacts:
    """What a run's step tree is read from; child runs' facts load when the tree reaches them."""
    run_id = str(run["run_id"])
    task = db.fetch_one(conn, "engine_task", dict(run_id=run_id))
    rows = db.fetch_all(conn, "run_checkpoints", dict(run_id=run_id))

    def child(child_id: str) -> step_tree.RunFacts | None:
        row = db.fetch_one(conn, "get_run", dict(run_id=child_id))
        return None if row is None else run_facts(conn, row)

    return step_tree.RunFacts(
        run=run,
        state=run_state(run, task),
        checkpoints={r["checkpoint_name"]: r["state"] for r in rows},
        written_at={r["checkpoint_name"]: r["updated_at"] for r in rows},
        claims=db.fetch_all(conn, "run_claims", dict(run_id=run_id)),
        child=child,
        reports=db.fetch_all(conn, "step_reports", dict(run_id=run_id)),
    )


@dataclass(frozen=True)
class Entry:
    """One entry of a run's thread."""

    seq: int
    author_kind: str
    author: str
    kind: str
    step_key: str | None
    text: str
    created_at: datetime


class GateView(TypedDict):
    """The gate a run waits at: its step, the key a decision names, what it accepts, who may
    decide, what its timeout does."""

    step: str
    key: str
    accept: Any
    approvers: list[str]
    on_timeout: str | None


class EventWait(TypedDict):
    """The outside event a run waits for: its names, and the key an event must carry."""

    events: list[str]
    key: str | None


# A run's agent steps' model use ("in" is a keyword: the functional form).
AgentUse = TypedDict("AgentUse", {"in": int, "out": int, "cost_usd": float | None, "turns": int})


@dataclass(frozen=True)
class RunView:
    """A run as the CLI, the console and the notebooks show it. `steps` is the step tree
    (step_tree.py: JSON-shaped nodes, nested by branch, iteration and child run);
    `to_json()` is `threadline show --json`."""

    run_id: str
    workflow: str
    workflow_version: int
    state: str
    trigger: dict[str, Any]
    payload: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None
    wake_at: datetime | None  # while sleeping
    await_key: str | None
    gate: GateView | None  # the open gate
    event_wait: EventWait | None  # the outside event it waits for
    steps: list[step_tree.StepNode]
    outputs: dict[str, Any]  # the run's declared outputs, once it completed
    parent: dict[str, Any] | None  # a child run's place in its parent
    thread: list[Entry] = field(default_factory=list)
    # Its agent steps' model use: tokens in and out, cost_usd (None: not priced), turns.
    agent_use: AgentUse | None = None

    def to_json(self) -> dict[str, Any]:
        def value(v: Any) -> Any:
            return v.isoformat() if isinstance(v, datetime) else v

        out = {f.name: value(getattr(self, f.name)) for f in fields(self) if f.name != "thread"}
        out["thread"] = [{k: value(v) for k, v in asdict(e).items()} for e in self.thread]
        return out


def run_view(conn: psycopg.Connection[Any], run_id: str, *, thread_limit: int = 1000) -> RunView:
    run = db.fetch_one(conn, "get_run", dict(run_id=run_id))
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    facts = run_facts(conn, run)
    state = facts.state
    entries = db.fetch_all(conn, "run_entries", dict(run_id=run_id, after=0, limit=thread_limit))
    return RunView(
        run_id=str(run["run_id"]),
        workflow=run["workflow"],
        workflow_version=run["workflow_version"],
        state=state,
        trigger=run["trigger"],
        payload=run["payload"],
        created_at=run["created_at"],
        finished_at=run["finished_at"],
        wake_at=run["wake_at"] if state == RunState.SLEEPING else None,
        await_key=run["await_key"] if run["awaiting"] else None,
        gate=_gate_view(run),
        event_wait=_event_wait(conn, run),
        steps=step_tree.steps_tree(facts),
        outputs=(run["outputs"] or {}).get("declared") or {},
        parent=run["parent"],
        thread=[Entry(**{f.name: e[f.name] for f in fields(Entry)}) for e in entries],
        agent_use=_agent_use(conn, run_id),
    )


def _agent_use(conn: psycopg.Connection[Any], run_id: str) -> AgentUse | None:
    use = db.fetch_one(conn, "run_agent_use", dict(run_id=run_id))
    if not (use and use["turns"]):
        return None
    return AgentUse(
        {"in": use["in"], "out": use["out"], "cost_usd": use["cost_usd"], "turns": use["turns"]}
    )


def show_run(
    conn: psycopg.Connection[Any], run_id: str, *, thread_limit: int = 1000
) -> dict[str, Any]:
    """A run's view in its JSON form (`threadline show --json`)."""
    return run_view(conn, run_id, thread_limit=thread_limit).to_json()


def _event_wait(conn: psycopg.Connection[Any], run: dict[str, Any]) -> EventWait | None:
    """The outside event a run waits for ({events, key}), or None."""
    if not (run["awaiting"] and run["await_kind"] == AwaitKind.EVENT):
        return None
    row = db.fetch_one(conn, "event_wait", dict(step_key=run["await_key"]))
    return None if row is None else EventWait(events=row["names"], key=row["key"])


def _gate_view(run: dict[str, Any]) -> GateView | None:
    gate = gates.current_gate(run)
    if gate is None:
        return None
    return GateView(
        step=gate["id"],
        key=run["await_key"],
        accept=gate.get("accept"),
        approvers=gate.get("approvers") or [],
        on_timeout=gate.get("on_timeout"),
    )


def health(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    workers = list_workers(conn)
    counts = db.fetch_row(conn, "health_counts")

    def view(kind: str) -> list[dict[str, Any]]:
        return [
            {
                "id": w["id"],
                "host": w["host"],
                "pid": w["pid"],
                "last_beat_age_s": round(w["last_beat_age_s"], 1),
                "alive": w["alive"],
                # Stopped cleanly (it said so as it closed), not dead: nothing to look into.
                "stopped": not w["alive"] and w.get("stopped_at") is not None,
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
        "paused": pause.describe(switch) if (switch := pause.state(conn)) else None,
        # From this process's environment: where the bots process runs elsewhere, its own may
        # hold a command backend this one does not.
        "bots_without_backend": bots_without_backend(conn),
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
        raise RunNotFound(f"run {run_id} has no entry {seq}")
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


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    """The database clock, which every time a run's rows hold was read from."""
    return db.fetch_row(conn, "db_now")["now"]


def conductor_beat(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The heartbeat badge's inputs: health plus the newest conductor beat."""
    beat = db.fetch_row(conn, "last_conductor_beat")
    return health(conn) | {
        "last_beat_at": beat["last_beat_at"],
        "db_now": db.fetch_row(conn, "db_now")["now"],
    }
