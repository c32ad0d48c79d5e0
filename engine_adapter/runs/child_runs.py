"""Child runs: the parallel branches, parallel foreach items and sub-workflows of a parent run.

A child is a run like any other, spawned through `spawn.spawn` by its parent's handler (inside a
checkpoint, with an idempotency key per parent, step, try and branch, so a replay spawns nothing
twice). When it finishes, however it finishes, migration 009 emits the event its parent's step
awaits. Cancelling a parent cancels its open children, and theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from engine_adapter.model import domain, names
from engine_adapter.model.errors import NotFound
from engine_adapter.model.settings import QUEUE
from engine_adapter.model.vocab import TriggerKind
from engine_adapter.runs import run_state, thread_entries
from engine_adapter.runs.spawn import ChildOf, Snapshot, SpawnError, spawn
from engine_adapter.store import db


@dataclass(frozen=True)
class Branch:
    """One branch of a fan-out: a parallel group's branch or one item of a parallel foreach."""

    name: str  # the branch name, or the item's number (1-based)
    steps: list[dict[str, Any]]
    what: str  # "branch" or "item", for the thread
    loop: dict[str, Any] = field(default_factory=dict)  # item, index, iteration of an item


def spawn_branch(
    conn: psycopg.Connection[Any],
    parent_id: str,
    recipe: dict[str, Any],
    payload: dict[str, Any],
    path: str,
    try_no: int,
    branch: Branch,
    inherited: dict[str, Any],
    notify: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Start one branch as a child run of the parent's workflow version; say so in the thread."""
    with conn.transaction():
        parent = _open_parent(conn, parent_id)
        child = ChildOf(
            run_id=parent_id,
            step=path,
            try_no=try_no,
            branch=branch.name,
            inherited=inherited,
            notify=notify,
        )
        spawned = spawn(
            conn,
            parent["workflow"],
            payload,
            trigger={
                "kind": TriggerKind.PARENT,
                "run_id": parent_id,
                "step": path,
                "branch": branch.name,
                "what": branch.what,
            },
            idempotency_key=names.child_key(parent_id, path, try_no, branch.name),
            child=child,
            snapshot=Snapshot(
                # The parent's declared outputs are the parent's own.
                {**{k: v for k, v in recipe.items() if k != "outputs"}, "steps": branch.steps},
                parent["workflow_version"],
                parent["recipe_hash"],
            ),
        )
        label = f"item {branch.name}" if branch.what == "item" else f"branch {branch.name}"
        _note(
            conn,
            parent_id,
            f"Step {names.step_id_of(path)}: {label} started as run "
            f"{names.short_run_id(spawned.run_id)}.",
            path,
            try_no,
            branch.name,
            spawned.run_id,
        )
    return {"run_id": spawned.run_id}


def spawn_workflow(
    conn: psycopg.Connection[Any],
    parent_id: str,
    workflow: str,
    payload: dict[str, Any],
    path: str,
    try_no: int,
    branch: str = "run",
    notify: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Start a sub-workflow as a child run; an error (no such workflow, a refused payload) is
    returned, and the step fails with it. `branch` tells apart the runs one step starts (an
    agent's start_workflow may start several)."""
    try:
        with conn.transaction():
            _open_parent(conn, parent_id)
            spawned = spawn(
                conn,
                workflow,
                payload,
                trigger={
                    "kind": TriggerKind.PARENT,
                    "run_id": parent_id,
                    "step": path,
                    "branch": branch,
                    "what": "sub-workflow",
                },
                idempotency_key=names.child_key(parent_id, path, try_no, branch),
                child=ChildOf(
                    run_id=parent_id, step=path, try_no=try_no, branch=branch, notify=notify
                ),
            )
            _note(
                conn,
                parent_id,
                f"Step {names.step_id_of(path)}: started workflow {workflow} "
                f"as run {names.short_run_id(spawned.run_id)}.",
                path,
                try_no,
                branch,
                spawned.run_id,
            )
    except (SpawnError, NotFound) as err:  # NotFound: no such workflow
        error = f"Step {names.step_id_of(path)}: workflow {workflow} could not start: {err}"
        with conn.transaction():
            thread_entries.system_note(
                conn,
                parent_id,
                error,
                dedupe_key=f"spawn-failed:{path}:{try_no}"
                + ("" if branch == "run" else f":{branch}"),
            )
        return {"error": error}
    return {"run_id": spawned.run_id}


class ParentEnded(Exception):
    """The run ended (cancelled: its timeout, a person) while its handler was starting a child:
    no child starts, and the conductor stops the handler as the engine stops a cancelled run."""


def _open_parent(conn: psycopg.Connection[Any], parent_id: str) -> dict[str, Any]:
    """The parent's row, locked for the child's transaction: a cancel of the run tree takes the
    same lock first, so a child starts either before it (and is cancelled with the tree) or not
    at all. Without it a branch started just after its parent's cancel ran on, alone."""
    parent = run_state.lock_run(conn, parent_id)
    if parent["state"] in domain.ENDED:
        raise ParentEnded(f"run {parent_id} is {parent['state']}: it starts no child run")
    return parent


def _note(
    conn: psycopg.Connection[Any],
    parent_id: str,
    text: str,
    path: str,
    try_no: int,
    branch: str,
    child_id: str,
) -> None:
    thread_entries.system_note(
        conn,
        parent_id,
        text,
        dedupe_key=f"spawn:{path}:{try_no}:{branch}",
        data={"child_run": child_id, "step": path, "branch": branch},
    )
    db.notify(conn, parent_id, "thread")


def cancel_losers(
    conn: psycopg.Connection[Any],
    parent_id: str,
    step_id: str,
    won: dict[str, Any],
    started: dict[str, str],
) -> dict[str, Any]:
    """`completion: any`: the first branch to finish wins; the others are cancelled (their bots
    stop running commands: TERM, a grace period, KILL) and say why."""
    losers = [run_id for name, run_id in started.items() if name != won["branch"]]
    with conn.transaction():
        for run_id in losers:
            cancel_run_tree(
                conn,
                run_id,
                f"branch {won['branch']} of step {step_id} finished first (completion: any)",
            )
        thread_entries.system_note(
            conn,
            parent_id,
            f"Step {step_id}: branch {won['branch']} finished first ({won['status']}); "
            f"{len(losers)} other branch{'es' if len(losers) != 1 else ''} cancelled.",
            dedupe_key=f"winner:{step_id}:{won['run_id']}",
            data={"winner": won["branch"], "child_run": won["run_id"]},
        )
        db.notify(conn, parent_id, "thread")
    return {"cancelled": losers}


def cancel_run_tree(conn: psycopg.Connection[Any], run_id: str, why: str) -> bool:
    """Cancel a child run that has not finished, and its own open children; False if finished."""
    run = run_state.lock_run(conn, run_id)
    if run["state"] in domain.FINISHED:
        return False
    db.fetch_one(conn, "cancel_engine_task", dict(queue=QUEUE, run_id=run_id))
    run_state.set_run_state(conn, run_id, domain.CANCELLED, run["current_step"], run["current_try"])
    thread_entries.system_note(
        conn,
        run_id,
        f"Run cancelled: {why}.",
        dedupe_key="cancelled-by-parent",
    )
    db.notify(conn, run_id, domain.CANCELLED)
    cancel_open_children(conn, run_id, "its parent run was cancelled")
    return True


def cancel_open_children(conn: psycopg.Connection[Any], run_id: str, why: str) -> int:
    """Cancel every unfinished child of a run (inside the caller's transaction)."""
    return sum(
        cancel_run_tree(conn, str(row["run_id"]), why)
        for row in db.fetch_all(conn, "open_children", dict(run_id=run_id))
    )
