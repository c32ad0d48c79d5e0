"""The one door every run comes through.

Every trigger (schedule, webhook, event, manual) is a caller of `spawn`; the run's `trigger`
records which one, who called and its delivery / slot / event / request id, and the thread's
opening note says it in words. A new run under a concurrency cap (its workflow's
`max_concurrent_runs`, a global or an initiator cap: run_limits.py) starts `queued`: admitted here
at once while there is room, else in line (commit order) as others finish.

The database writes a run only through threadline.spawn_run (migration 032), one statement: it
takes the recipe from the workflow's row itself and refuses what the caller may not start (the
webhook ingress: only a workflow whose webhook or on_event it serves).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import pq
from psycopg.types.json import Jsonb

from engine_adapter.access import authorization
from engine_adapter.catalog.workflows import get_workflow
from engine_adapter.model.domain import TRIGGER_KINDS
from engine_adapter.model.errors import CONTRACT_INVALID, Invalid, Refused
from engine_adapter.model.identity import Actor
from engine_adapter.model.settings import HANDLER_NAME, HANDLER_VERSION, QUEUE
from engine_adapter.model.vocab import RunState, TriggerKind
from engine_adapter.recipes import payload_schema, recipe_doc
from engine_adapter.runs import pause, run_limits, thread_entries
from engine_adapter.store import db

# Conductor attempts: each conductor crash while it holds a run burns one; step failures never do.
TASK_OPTIONS = {
    "max_attempts": 50,
    "retry_strategy": {"kind": "exponential", "base_seconds": 1, "factor": 2, "max_seconds": 30},
}
# SQLSTATEs of threadline.spawn_run (migration 032).
NO_WORKFLOW, DISABLED, PAUSED, STALE = "TLS01", "TLS02", "TLS03", "TLS04"
SPAWN_TRIES = 3


class SpawnError(Invalid):
    contract_exit, envelope_type = CONTRACT_INVALID, "invalid_payload"


class Paused(Refused, SpawnError):
    """A new run refused while the global pause switch is on (pause.py)."""


class BadPayload(SpawnError):
    """The payload itself is refused: not storable, or against the workflow's payload_schema."""


class PayloadRejected(BadPayload):
    """The payload breaks the workflow's payload_schema; each problem names its payload path."""

    def __init__(self, workflow: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"workflow {workflow!r} refuses the payload: " + "; ".join(problems))


def check_payload(payload: Any) -> dict[str, Any]:
    """A run's payload: a JSON object ({} when none was given)."""
    payload = {} if payload is None else payload
    if not isinstance(payload, dict):
        raise SpawnError(f"payload must be a JSON object, not {type(payload).__name__}")
    # What PostgreSQL cannot store (NUL, lone surrogates) or what is unbounded is refused with
    # its path here, rather than failing as a raw database error.
    problems = recipe_doc.check_document(payload)
    if problems:
        raise BadPayload(
            "\n".join(
                f"payload.{p}"
                if not p.startswith("top level")
                else f"payload{p.removeprefix('top level')}"
                for p in problems
            )
        )
    return payload


def manual_key(slug: str, request_id: str) -> str:
    """The idempotency key of a manual spawn: a client request id counts once per workflow
    (the CLI and the console both use it), apart from schedule:, event: and webhook: keys."""
    return f"manual:{slug}:{request_id}"


def admit_event(run_id: str) -> str:
    """The event a queued run's handler awaits; emitted by threadline.admit_queued (migration
    002)."""
    return f"threadline.run.admit:{run_id}"


@dataclass(frozen=True)
class ChildOf:
    """Where a child run belongs in its parent, and what it starts from."""

    run_id: str  # the parent run
    step: str  # the parent's step path
    try_no: int
    branch: str  # the branch name, or the item's number
    inherited: dict[str, Any] = field(default_factory=dict)  # the parent's results so far
    notify: tuple[str, ...] = ()  # events to emit when the child finishes (besides run.done)

    def record(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "step": self.step,
            "try": self.try_no,
            "branch": self.branch,
            "notify": list(self.notify),
        }


@dataclass(frozen=True)
class Snapshot:
    """A recipe version a new run takes instead of its workflow's current one: a branch runs its
    parent's (with the branch's steps), a rerun its original run's."""

    recipe: dict[str, Any]
    version: int
    hash: str


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
    child: ChildOf | None = None,
    snapshot: Snapshot | None = None,
    carried: dict[str, Any] | None = None,
    actor: Actor | None = None,
) -> Spawned:
    """Snapshot the workflow's recipe and the payload into a new run, in one transaction.

    A repeated idempotency key returns the existing run with created=False. A child run (a
    parallel branch, a foreach item, a sub-workflow) comes through here too: it runs the steps
    `snapshot` holds (else its workflow's), never waits for admission and does not count
    against max_concurrent_runs (its parent holds the place). A rerun (`carried`: the results it
    takes over from its original run) runs its original's snapshot.

    The database writes the run (threadline.spawn_run, migration 032): it reads the recipe from
    the workflow's row itself and checks who may start it; this side checks the payload against
    the version it names and words the thread's notes. A person's door passes its `actor`:
    the authorization layer decides, in the run's own transaction (Threadline's own spawns,
    child runs and schedule ticks among them, pass none).
    """
    payload = check_payload(payload)
    trigger = trigger or {"kind": TriggerKind.MANUAL}
    if trigger.get("kind") not in TRIGGER_KINDS:
        raise SpawnError(
            f"trigger kind {trigger.get('kind')!r} must be one of {', '.join(TRIGGER_KINDS)}"
        )
    fresh = False
    for _ in range(SPAWN_TRIES):
        try:
            return _spawn(
                conn,
                workflow,
                payload,
                trigger,
                idempotency_key,
                child,
                snapshot,
                carried,
                fresh,
                actor,
            )
        except psycopg.Error as err:
            if err.sqlstate == DISABLED:
                raise SpawnError(f"workflow {workflow!r} is disabled") from None
            if err.sqlstate == PAUSED:
                switch = pause.state(conn)
                if switch is not None:
                    raise Paused(pause.describe(switch)) from None
            elif err.sqlstate == NO_WORKFLOW:
                _workflow(conn, workflow, fresh=True)  # WorkflowNotFound, unless made since
            elif err.sqlstate != STALE:
                raise
            fresh = True  # the workflow (or the pause) changed since it was read: read it again
    raise SpawnError(f"workflow {workflow!r} kept changing while a run of it was starting")


def _spawn(
    conn: psycopg.Connection[Any],
    workflow: str,
    payload: dict[str, Any],
    trigger: dict[str, Any],
    idempotency_key: str | None,
    child: ChildOf | None,
    snapshot: Snapshot | None,
    carried: dict[str, Any] | None,
    fresh: bool,
    actor: Actor | None = None,
) -> Spawned:
    if snapshot is not None:  # a version of its own, whatever the workflow is now
        recipe, version, recipe_hash = snapshot.recipe, snapshot.version, snapshot.hash
    else:
        wf = _workflow(conn, workflow, fresh)
        if not wf["enabled"]:
            raise SpawnError(f"workflow {workflow!r} is disabled")
        recipe, version, recipe_hash = wf["recipe"], wf["version"], wf["hash"]
    if child is None or snapshot is None:
        problems = payload_schema.payload_problems(recipe.get("payload_schema"), payload)
        if problems:  # before anything is written
            raise PayloadRejected(workflow, problems)
    # Threadline's own spawn on a connection with no transaction open is one statement, which
    # commits alone: a transaction block around it would cost two round trips more.
    alone = (
        actor is None
        and conn.autocommit
        and conn.info.transaction_status == pq.TransactionStatus.IDLE
    )
    with (
        nullcontext()
        if alone
        else authorization.transaction(conn, actor, authorization.Action.SPAWN, workflow=workflow)
    ):
        row = db.fetch_one(
            conn,
            "spawn_run",
            dict(
                queue=QUEUE,
                task=HANDLER_NAME,
                handler_v=HANDLER_VERSION,
                options=Jsonb(TASK_OPTIONS),
                workflow=workflow,
                version=None if snapshot else version,
                hash=None if snapshot else recipe_hash,
                payload=Jsonb(payload),
                trigger=Jsonb(trigger),
                idempotency_key=idempotency_key,
                initiator=None if child else run_limits.initiator_of(trigger),
                opening=_opening_line(workflow, version, recipe, payload, trigger),
                child=None
                if child is None
                else Jsonb({**child.record(), "inherited": child.inherited}),
                snapshot=None
                if snapshot is None
                else Jsonb({"recipe": recipe, "version": version, "hash": recipe_hash}),
                carried=None if carried is None else Jsonb(carried),
            ),
        )
        assert row is not None
        run_id = str(row["run_id"])
        if row["created"] and row["state"] == RunState.QUEUED:  # say in the thread why it waits
            # (alone: in a statement after the spawn's; a process killed between the two leaves
            # the queued run without this note, the run itself as it would be with it)
            note = run_limits.Caps.of(conn, run_id).waiting_note()
            thread_entries.system_note(conn, run_id, note, dedupe_key=RunState.QUEUED)
    return Spawned(run_id, created=bool(row["created"]))


# The workflows spawned lately, per database: a spawn then names the version it checked the
# payload against and wrote its notes for, and the database refuses a stale one (STALE), so it
# costs no read of the workflow's row.
_KNOWN_MAX = 256
_known: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
_known_lock = threading.Lock()


def _workflow(conn: psycopg.Connection[Any], slug: str, fresh: bool) -> dict[str, Any]:
    """The workflow's row as last read (a disabled one is read again: it may be enabled since)."""
    key = (conn.info.host, conn.info.port, conn.info.dbname, slug)
    with _known_lock:
        known = None if fresh else _known.get(key)
    if known is not None and known["enabled"]:
        return known
    wf = get_workflow(conn, slug)
    with _known_lock:
        _known[key] = wf
        _known.move_to_end(key)
        while len(_known) > _KNOWN_MAX:
            _known.popitem(last=False)
    return wf


def describe_trigger(trigger: dict[str, Any]) -> str:
    """How a run started, in words: "by schedule, slot 2026-11-23 07:00 Europe/Berlin"."""
    kind, caller = trigger.get("kind", TriggerKind.MANUAL), trigger.get("caller")
    if kind == TriggerKind.SCHEDULE:
        text = f"by schedule, slot {trigger.get('slot_local') or trigger.get('slot')}"
        if trigger.get("skipped"):
            n = trigger["skipped"]
            text += f" (catching up; {n} earlier slot{'s' if n != 1 else ''} skipped)"
        return text
    if kind == TriggerKind.WEBHOOK:
        text = f"by webhook {trigger.get('path', '')}".rstrip()
        if trigger.get("delivery"):
            text += f", delivery {trigger['delivery']}"
        return text + (f", from {caller}" if caller else "")
    if kind == TriggerKind.PARENT:
        return (
            f"by run {trigger.get('run_id')}, step {trigger.get('step')}, "
            f"{trigger.get('what', 'branch')} {trigger.get('branch')}"
        )
    if kind == TriggerKind.RERUN:
        text = f"as a rerun of run {trigger.get('run_id')} from step {trigger.get('from')}"
        return text + (f", by {caller}" if caller else "")
    if kind == TriggerKind.EVENT:
        text = f"by event {trigger.get('event')}, id {trigger.get('event_id')}"
        return text + (f", emitted by {caller}" if caller else "")
    if trigger.get("on_behalf_of"):
        caller = f"{caller} for {trigger['on_behalf_of']}"
    if trigger.get("minted_by"):  # a token minted for the caller by someone else (an admin)
        caller = f"{caller}, via a token minted by {trigger['minted_by']}"
    text = "manually" + (f" by {caller}" if caller else "")
    return text + (f", request {trigger['request_id']}" if trigger.get("request_id") else "")


def _opening_line(
    workflow: str,
    version: int,
    recipe: dict[str, Any],
    payload: dict[str, Any],
    trigger: dict[str, Any],
) -> str:
    steps = ", ".join(s["id"] for s in recipe["steps"])
    text = f"Run of {workflow} v{version} started {describe_trigger(trigger)}. Steps: {steps}."
    if payload:
        text += f"\nPayload: {json.dumps(payload, ensure_ascii=False)}"
    return text
