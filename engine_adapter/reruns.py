"""Rerun from a step: a new run of the same recipe version that carries over the results of the
steps before STEP from the original run (never executing them again) and runs from STEP on,
optionally with an edited payload. The two runs' threads link to each other.
"""

from __future__ import annotations

from typing import Any

import psycopg

from . import authorization, db, domain, names, run_state, step_tree, thread_entries
from .commands import CommandRefused
from .identity import Actor
from .read_model import run_facts
from .recipes import find_step_doc, step_docs
from .spawn import Snapshot, Spawned, spawn

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
        views: dict[str, dict[str, Any]] = {}
        for node in tree[: len(before)]:
            doc = find_step_doc(run["recipe"], node["id"]) or {}
            continued = node["status"] == domain.FAILED and doc.get("on_failure") == "continue"
            if node["status"] not in _CARRYABLE and not continued:
                raise CommandRefused(
                    f"step {node['id']} is {node['status']} in run {run_id}: only steps that "
                    f"finished can be carried over (rerun from {node['id']} or earlier)"
                )
            for _, n in step_tree.flatten([node]):
                if n["kind"] not in ("branch", "iteration"):
                    views[n["id"]] = _view(n)
        named = {
            s["output"]: views[s["id"]]["output"]
            for _, s in step_docs(run["recipe"]["steps"])
            if s.get("output") and s["id"] in views
        }
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
            trigger={"kind": "rerun", "run_id": run_id, "from": from_step, "caller": actor.label},
            snapshot=Snapshot(run["recipe"], run["workflow_version"], run["recipe_hash"]),
            carried=carried,
        )
        thread_entries.append(
            conn,
            run_id,
            "human",
            actor.label,
            "note",
            f"Rerun from step {from_step} by {actor.label}: run "
            f"{names.short_run_id(spawned.run_id)}.",
            data={"rerun": spawned.run_id, "from": from_step, **actor.as_record()},
        )
        db.notify(conn, run_id, "thread")
    return spawned


def _view(node: dict[str, Any]) -> dict[str, Any]:
    status = domain.COMPLETED if node["status"] == domain.CARRIED_OVER else node["status"]
    return {
        "status": status,
        "output": node.get("output"),
        "exit_code": node.get("exit_code"),
        "skipped": status == domain.SKIPPED,
        "reason": node.get("reason"),
    }


def _enclosing(recipe: dict[str, Any], step_id: str) -> str | None:
    """The top-level step a nested step sits in, if it exists."""
    for top in recipe["steps"]:
        if any(s.get("id") == step_id for _, s in step_docs([top])):
            return top["id"]
    return None
