"""Rerun from a step: a new run of the same recipe version that carries over the results of the
steps before STEP from the original run (never executing them again) and runs from STEP on,
optionally with an edited payload. The two runs' threads link to each other.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast

import psycopg
from absurd_sdk import StepHandle, TaskContext

from engine_adapter.access import authorization
from engine_adapter.catalog import proposals
from engine_adapter.catalog.workflows import get_workflow
from engine_adapter.conductor.run_handler import RunHandler
from engine_adapter.model import domain, names
from engine_adapter.model.domain import HandlerParams
from engine_adapter.model.identity import Actor
from engine_adapter.model.vocab import EntryKind, TriggerKind
from engine_adapter.read import step_tree
from engine_adapter.read.read_model import run_facts
from engine_adapter.recipes.recipes import find_step_doc, step_docs
from engine_adapter.runs import run_state, thread_entries
from engine_adapter.runs.commands import CommandRefused
from engine_adapter.runs.spawn import Snapshot, Spawned, spawn
from engine_adapter.runs.thread_entries import RunNotFound
from engine_adapter.store import db

R = TypeVar("R")

# A carried-over step must have finished in the original run in one of these ways.
_CARRYABLE = (domain.COMPLETED, domain.SKIPPED, domain.CARRIED_OVER)


def rerun(
    conn: psycopg.Connection[Any],
    run_id: str,
    from_step: str,
    actor: Actor,
    payload: dict[str, Any] | None = None,
) -> Spawned:
    """Start the rerun; CommandRefused (nothing written) names why it cannot be."""
    with authorization.change(
        conn, actor, authorization.Action.RERUN, run_id=run_id, detail={"from": from_step}
    ):
        run = run_state.lock_run(conn, run_id)
        if run["parent_run_id"]:
            raise CommandRefused(
                f"run {run_id} is part of run {run['parent_run_id']}: rerun that run"
            )
        top = [s["id"] for s in run["recipe"]["steps"]]
        if from_step not in top:
            inside = _enclosing(run["recipe"], from_step)
            if inside:
                raise CommandRefused(
                    f"step {from_step!r} is inside step {inside!r}: rerun from a top-level step "
                    f"({', '.join(top)})"
                )
            raise CommandRefused(f"run {run_id} has no step {from_step!r} ({', '.join(top)})")
        before = top[: top.index(from_step)]
        tree = step_tree.steps_tree(run_facts(conn, run))
        for node in tree[: len(before)]:
            doc = find_step_doc(run["recipe"], node["id"]) or {}
            continued = node["status"] == domain.FAILED and doc.get("on_failure") == "continue"
            if node["status"] not in _CARRYABLE and not continued:
                raise CommandRefused(
                    f"step {node['id']} is {node['status']} in run {run_id}: only steps that "
                    f"finished can be carried over (rerun from {node['id']} or earlier)"
                )
        _refuse_unreviewed(conn, run, before, payload)
        views, named = handed_on(conn, run, len(before))
        carried = {
            "run_id": run_id,
            "from": from_step,
            "steps": before,
            "views": views,
            "named": named,
        }
        spawned = spawn(
            conn,
            run["workflow"],
            run["payload"] if payload is None else payload,
            trigger={
                "kind": TriggerKind.RERUN,
                "run_id": run_id,
                "from": from_step,
                "caller": actor.label,
            },
            snapshot=Snapshot(run["recipe"], run["workflow_version"], run["recipe_hash"]),
            carried=carried,
        )
        thread_entries.by_person(
            conn,
            run_id,
            actor,
            EntryKind.NOTE,
            f"Rerun from step {from_step} by {actor.label}: run "
            f"{names.short_run_id(spawned.run_id)}.",
            data={"rerun": spawned.run_id, "from": from_step},
        )
        db.notify(conn, run_id, "thread")
    return spawned


def _refuse_unreviewed(
    conn: psycopg.Connection[Any],
    run: dict[str, Any],
    before: list[str],
    payload: dict[str, Any] | None,
) -> None:
    """A rerun may not get past a person's decision or a protected workflow's review:
    - a decision made at a carried step (in the run or in the runs its steps started, or, for
      steps the run itself carried over, in the run it carried them from) is not carried into a
      rerun with another payload: the person decided about other input;
    - a rerun runs its original's version, so a protected workflow's older version runs again
      only where going back to it would not need a reviewed proposal (workflows.rollback)."""
    asked = run["payload"] if payload is None else payload
    here, steps = run, before
    while steps:
        if asked != here["payload"]:
            for d in db.fetch_all(conn, "decisions_in_tree", dict(run_id=here["run_id"])):
                gate = names.split_step_key(d["step_key"])[1]
                top = names.top_step_of(d["from_step"] or gate)
                if top in steps:
                    raise CommandRefused(
                        f"{d['actor']} decided ({d['decision']}) at step "
                        f"{names.step_id_of(gate)} for the payload of run {here['run_id']}: a "
                        f"rerun with another payload must ask again (rerun from step {top} or "
                        "earlier)"
                    )
        trigger = here["trigger"] or {}
        if trigger.get("kind") != TriggerKind.RERUN:
            break
        ids = [s["id"] for s in here["recipe"]["steps"]]
        steps = [s for s in steps if s in ids[: ids.index(trigger["from"])]]
        if not steps:
            break
        try:  # what `here` carried over was decided, if at all, in its original
            here = run_state.lock_run(conn, trigger["run_id"])
        except RunNotFound:  # cleaned up: who decided there is no longer known
            if asked != here["payload"]:
                raise CommandRefused(
                    f"run {here['run_id']} carried steps over from run {trigger['run_id']}, "
                    f"which is cleaned up: a rerun with another payload runs from step "
                    f"{steps[0]} or earlier"
                ) from None
            break
    current = get_workflow(conn, run["workflow"])
    if current["hash"] != run["recipe_hash"]:
        why = proposals.refuse_direct(current["recipe"], run["recipe"])
        if why:
            raise CommandRefused(
                f"run {run['run_id']} ran version {run['workflow_version']} of workflow "
                f"{run['workflow']}, which is at version {current['version']}; a rerun runs "
                f"the old version again: {why}"
            )


class _Unrecorded(Exception):
    """The journal holds no checkpoint of this name: the run never got this far."""


class _Journal(TaskContext):
    """The handler's context over a run's journal, for a replay that only reads: each checkpoint
    is the one the run wrote (named as Absurd names repeats), nothing is written or awaited. A
    TaskContext (whose own constructor refuses to run) only so that the handler takes it."""

    def __init__(self, run_id: str, checkpoints: dict[str, Any]) -> None:  # no super(): it refuses
        self.task_id = run_id
        self.checkpoints = checkpoints
        self.used: dict[str, int] = {}

    def read(self, name: str) -> Any:
        self.used[name] = self.used.get(name, 0) + 1
        key = name if self.used[name] == 1 else f"{name}#{self.used[name]}"
        if key not in self.checkpoints:
            raise _Unrecorded(key)
        return self.checkpoints[key]

    def begin_step(self, name: str) -> StepHandle:
        return StepHandle(name, name, done=True, state=self.read(name))

    def complete_step(self, handle: StepHandle, value: R) -> R:
        return cast(R, handle.state)

    def step(self, name: str, fn: Callable[[], R]) -> R:
        return cast(R, self.read(name))

    def await_event(
        self, event_name: str, step_name: str | None = None, timeout: int | None = None
    ) -> Any:
        return self.read(step_name or f"$awaitEvent:{event_name}")

    def sleep_until(self, step_name: str, wake_at: datetime | int | float) -> None:
        self.read(step_name)


def handed_on(
    conn: psycopg.Connection[Any], run: dict[str, Any], count: int
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """What the run's first `count` top-level steps handed on to the steps after them: each
    step's view (domain.step_view) and the named outputs. Read by replaying the run's own handler
    over its journal, so they are the very values its later steps read, however the step ran
    (loops, branches, the winner of an `any` group, a step carried over from a run before)."""
    run_id = str(run["run_id"])
    rows = db.fetch_all(conn, "run_checkpoints", dict(run_id=run_id))
    journal = _Journal(run_id, {r["checkpoint_name"]: r["state"] for r in rows})
    params: HandlerParams = {"payload": run["payload"], "recipe": run["recipe"]}
    carried = _carried_before(run, journal.checkpoints)
    if carried:
        params["carried"] = carried
    handler = RunHandler(conn, journal, params)
    try:
        handler.run_list(handler.steps[:count], "")
    except _Unrecorded as missing:  # its journal lost a record (none of ours removes one)
        parsed = names.parse_checkpoint(str(missing))
        step = names.top_step_of(parsed[1]) if parsed else "?"
        raise CommandRefused(
            f"run {run_id} no longer holds all that step {step} handed on: rerun from step "
            f"{step} or earlier"
        ) from None
    return handler.views, handler.named


def _carried_before(run: dict[str, Any], checkpoints: dict[str, Any]) -> dict[str, Any] | None:
    """A rerun's own carried steps, as its replay needs them: their checkpoints hold what they
    handed on (one written before they did holds the step's own view only)."""
    steps = [
        s["id"]
        for s in run["recipe"]["steps"]
        if names.checkpoint(names.CARRIED, s["id"]) in checkpoints
    ]
    if not steps:
        return None
    states = {sid: checkpoints[names.checkpoint(names.CARRIED, sid)] for sid in steps}
    views = {
        sid: {k: v for k, v in state.items() if k not in ("from", "carried")}
        for sid, state in states.items()
    }
    return {"run_id": states[steps[0]].get("from"), "steps": steps, "views": views, "named": {}}


def _enclosing(recipe: dict[str, Any], step_id: str) -> str | None:
    """The top-level step a nested step sits in, if it exists."""
    for top in recipe["steps"]:
        if any(s.get("id") == step_id for _, s in step_docs([top])):
            return top["id"]
    return None
