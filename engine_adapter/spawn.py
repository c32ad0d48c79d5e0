"""The one door every run comes through.

Every trigger (schedule, webhook, event, manual) is a caller of `spawn`; the run's `trigger`
records which one, who called and its delivery / slot / event / request id, and the thread's
opening note says it in words. A new run under a concurrency cap (its workflow's
`max_concurrent_runs`, a global or an initiator cap: run_limits.py) starts `queued`: admitted here
at once while there is room, else in line (commit order) as others finish.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import bot_config, db, pause, payload_schema, recipe_doc, run_limits, thread_entries
from .domain import TRIGGER_KINDS
from .settings import HANDLER_NAME, HANDLER_VERSION, QUEUE
from .workflows import get_workflow

# Conductor attempts: each conductor crash while it holds a run burns one; step failures never do.
CONDUCTOR_MAX_ATTEMPTS = 50
CONDUCTOR_RETRY = {"kind": "exponential", "base_seconds": 1, "factor": 2, "max_seconds": 30}


class SpawnError(ValueError):
    pass


class Paused(SpawnError):
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
) -> Spawned:
    """Snapshot the workflow's recipe and the payload into a new run, in one transaction.

    A repeated idempotency key returns the existing run with created=False. A child run (a
    parallel branch, a foreach item, a sub-workflow) comes through here too: it runs the steps
    `snapshot` holds (else its workflow's), never waits for admission and does not count
    against max_concurrent_runs (its parent holds the place). A rerun (`carried`: the results it
    takes over from its original run) runs its original's snapshot.
    """
    payload = check_payload(payload)
    trigger = trigger or {"kind": "manual"}
    if trigger.get("kind") not in TRIGGER_KINDS:
        raise SpawnError(
            f"trigger kind {trigger.get('kind')!r} must be one of {', '.join(TRIGGER_KINDS)}"
        )
    with conn.transaction():
        wf = get_workflow(conn, workflow)
        recipe = wf["recipe"]
        if snapshot is not None:
            # A version of its own, whatever the workflow is now (enabled or not).
            recipe = snapshot.recipe
            wf = {**wf, "version": snapshot.version, "hash": snapshot.hash}
        if child is None or snapshot is None:
            if not wf["enabled"]:
                raise SpawnError(f"workflow {workflow!r} is disabled")
            problems = payload_schema.payload_problems(recipe.get("payload_schema"), payload)
            if problems:  # before anything is written
                raise PayloadRejected(workflow, problems)
        params = {
            "v": HANDLER_VERSION,
            "workflow": workflow,
            "recipe": recipe,
            "payload": payload,
        }
        if child is not None:
            params["inherited"] = child.inherited
        if carried is not None:
            params["carried"] = carried
        limited = child is None and (
            recipe.get("max_concurrent_runs") is not None or run_limits.exist(conn)
        )
        if limited:
            params["admit"] = True  # the handler awaits admission before its first step
        options: dict[str, Any] = {
            "max_attempts": CONDUCTOR_MAX_ATTEMPTS,
            "retry_strategy": CONDUCTOR_RETRY,
        }
        if idempotency_key:
            options["idempotency_key"] = f"spawn:{idempotency_key}"
        task = db.fetch_one(
            conn,
            "spawn_task",
            dict(queue=QUEUE, task=HANDLER_NAME, params=Jsonb(params), options=Jsonb(options)),
        )
        run_id = str(task["task_id"])
        if not task["created"]:
            return Spawned(run_id, created=False)
        # While paused, no new run: the refusal rolls the new task back with the rest. A run in
        # flight may still start its branches and sub-workflows.
        switch = pause.state(conn) if child is None else None
        if switch is not None:
            raise Paused(pause.describe(switch))
        conn.execute(
            db.q("insert_run_thread"),
            dict(
                run_id=run_id,
                workflow=workflow,
                version=wf["version"],
                hash=wf["hash"],
                recipe=Jsonb(recipe),
                payload=Jsonb(payload),
                bot=wf["bot"],
                trigger=Jsonb(trigger),
                idempotency_key=idempotency_key,
                initiator=None if child is not None else run_limits.initiator_of(trigger),
            ),
        )
        agent = _agent_snapshot(conn, wf["bot"], child)
        if agent is not None:
            conn.execute(db.q("set_run_agent"), dict(run_id=run_id, agent=Jsonb(agent)))
        if child is not None:
            conn.execute(
                db.q("set_run_parent"),
                dict(run_id=run_id, parent_run_id=child.run_id, parent=Jsonb(child.record())),
            )
        thread_entries.system_note(
            conn,
            run_id,
            _opening_line(wf, recipe, payload, trigger),
            dedupe_key="opened",
            data={"trigger": trigger, "payload": payload},
        )
        if limited:
            _queue(conn, run_id, workflow)
        db.notify(conn, run_id, "spawn")
    return Spawned(run_id, created=True)


def _agent_snapshot(
    conn: psycopg.Connection[Any], bot: str, child: ChildOf | None
) -> dict[str, Any] | None:
    """The agent settings the run keeps for its life: a child run of the same bot takes its
    parent's (its run started under them), any other run its bot's settings as they are now."""
    if child is not None:
        parent = db.fetch_one(conn, "run_agent_of_bot", dict(run_id=child.run_id, bot=bot))
        if parent is not None:
            return parent["agent"]
    return bot_config.snapshot(conn, bot)


def _queue(conn: psycopg.Connection[Any], run_id: str, workflow: str) -> None:
    """Queue the new run, admit what fits (in line) and say in the thread if it has to wait."""
    db.fetch_one(conn, "queue_run", dict(run_id=run_id, workflow=workflow))
    db.fetch_one(conn, "admit_queued", dict(queue=QUEUE, workflow=workflow))
    caps = run_limits.Caps.of(conn, run_id)
    if caps.row.get("state") == "queued":
        thread_entries.system_note(conn, run_id, caps.waiting_note(), dedupe_key="queued")


def describe_trigger(trigger: dict[str, Any]) -> str:
    """How a run started, in words: "by schedule, slot 2026-11-23 07:00 Europe/Berlin"."""
    kind, caller = trigger.get("kind", "manual"), trigger.get("caller")
    if kind == "schedule":
        text = f"by schedule, slot {trigger.get('slot_local') or trigger.get('slot')}"
        if trigger.get("skipped"):
            n = trigger["skipped"]
            text += f" (catching up; {n} earlier slot{'s' if n != 1 else ''} skipped)"
        return text
    if kind == "webhook":
        text = f"by webhook {trigger.get('path', '')}".rstrip()
        if trigger.get("delivery"):
            text += f", delivery {trigger['delivery']}"
        return text + (f", from {caller}" if caller else "")
    if kind == "parent":
        return (
            f"by run {trigger.get('run_id')}, step {trigger.get('step')}, "
            f"{trigger.get('what', 'branch')} {trigger.get('branch')}"
        )
    if kind == "rerun":
        text = f"as a rerun of run {trigger.get('run_id')} from step {trigger.get('from')}"
        return text + (f", by {caller}" if caller else "")
    if kind == "event":
        text = f"by event {trigger.get('event')}, id {trigger.get('event_id')}"
        return text + (f", emitted by {caller}" if caller else "")
    if trigger.get("on_behalf_of"):
        caller = f"{caller} for {trigger['on_behalf_of']}"
    if trigger.get("minted_by"):  # a token minted for the caller by someone else (an admin)
        caller = f"{caller}, via a token minted by {trigger['minted_by']}"
    text = "manually" + (f" by {caller}" if caller else "")
    return text + (f", request {trigger['request_id']}" if trigger.get("request_id") else "")


def _opening_line(
    wf: dict[str, Any], recipe: dict[str, Any], payload: dict[str, Any], trigger: dict[str, Any]
) -> str:
    steps = ", ".join(s["id"] for s in recipe["steps"])
    text = (
        f"Run of {wf['slug']} v{wf['version']} started {describe_trigger(trigger)}. Steps: {steps}."
    )
    if payload:
        text += f"\nPayload: {json.dumps(payload, ensure_ascii=False)}"
    return text
