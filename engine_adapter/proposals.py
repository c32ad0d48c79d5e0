"""Proposals: a change to a workflow that opted in (`allow_proposals: true`) is proposed, with
its base hash, a summary, the diff and a risk level computed by rules; a person reviews it; and
applying it re-checks everything (opt-in, approval, expiry, that the base is still current).

Risk rules (the highest that any change meets):
- high: a new run_command (or a changed command), a gate removed or weakened (its timeout path
  now approves, fewer approvers, any reply accepted, a longer or no timeout), a wider `env`,
  more agent tools or startable workflows, network turned on, a new webhook, proposals turned off;
- medium: any other change to the steps, triggers, outputs or limits;
- low: only the name or description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import db, domain
from .identity import Actor
from .recipes import Recipe, step_docs
from .recipe_text import recipe_diff

ACTIVE = ("open", "approved")


class ProposalError(ValueError):
    """A proposal refused or not applied; the message says why. `kind`: invalid | stale |
    not_allowed | not_found | refused."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Risk:
    level: str  # low | medium | high
    reasons: tuple[str, ...]


def _steps(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for _, s in step_docs(doc.get("steps")) if isinstance(s.get("id"), str)}


def _gate_weaker(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    if old.get("on_timeout", "deny") == "deny" and new.get("on_timeout") == "approve":
        return "now approves when it times out"
    if set(new.get("approvers") or []) < set(old.get("approvers") or []) or (
        old.get("approvers") and not new.get("approvers")
    ):
        return "has fewer approvers"
    if old.get("accept", "decision") == "decision" and new.get("accept") == "any_reply":
        return "now takes any reply"
    if new.get("self_approval") and not old.get("self_approval"):
        return "may now be decided by the run's initiator"
    return None


def assess(old: dict[str, Any], new: dict[str, Any]) -> Risk:
    """The risk of changing recipe old into new, with the reasons (the rules above)."""
    high: list[str] = []
    before, after = _steps(old), _steps(new)
    for sid, step in after.items():
        was = before.get(sid)
        if domain.RUN_COMMAND in step and (
            was is None or was.get("run_command") != step[domain.RUN_COMMAND]
        ):
            high.append(f"step {sid} runs a new command")
        if domain.DISPATCH_TASK in step:
            tools = set(step.get("tools") or []) - set((was or {}).get("tools") or [])
            if tools:
                high.append(f"step {sid} gives its agent {', '.join(sorted(tools))}")
            started = set(step.get("workflows") or []) - set((was or {}).get("workflows") or [])
            if started:
                high.append(f"step {sid} may start {', '.join(sorted(started))}")
    for sid, step in before.items():
        if domain.HUMAN_GATE in step:
            now = after.get(sid)
            if now is None or domain.HUMAN_GATE not in now:
                high.append(f"gate {sid} is removed")
            elif why := _gate_weaker(step, now):
                high.append(f"gate {sid} {why}")
    wider = set(new.get("env") or []) - set(old.get("env") or [])
    if wider:
        high.append(f"steps get {', '.join(sorted(wider))} from the environment")
    if old.get("network") is False and new.get("network") is not False:
        high.append("steps get the network")
    hooks = {w["path"] for w in new.get("webhooks") or []} - {
        w["path"] for w in old.get("webhooks") or []
    }
    if hooks:
        high.append(f"new webhook {', '.join(sorted(hooks))}")
    if old.get("allow_proposals") and not new.get("allow_proposals"):
        high.append("proposals are turned off")
    if high:
        return Risk("high", tuple(high))
    rest = {k for k in set(old) | set(new) if old.get(k) != new.get(k)} - {"name", "description"}
    if rest:
        return Risk("medium", tuple(f"{k} changes" for k in sorted(rest)))
    return Risk("low", ("only the name or description changes",))


def propose(
    conn: psycopg.Connection[Any],
    workflow: str,
    base_hash: str,
    proposed: Recipe,
    summary: str,
    actor: Actor,
    run_id: str | None = None,
) -> dict[str, Any]:
    """A new open proposal; ProposalError when the workflow does not take proposals, the base
    is not its current version, or the proposal changes nothing."""
    from .workflows import WorkflowNotFound, get_workflow

    if not summary.strip():
        raise ProposalError("invalid", "summary: say what the change is for")
    if proposed.slug != workflow:
        raise ProposalError(
            "invalid", f"the proposed recipe is workflow {proposed.slug!r}, not {workflow!r}"
        )
    with conn.transaction():
        try:
            current = get_workflow(conn, workflow)
        except WorkflowNotFound as err:
            raise ProposalError("not_found", str(err)) from None
        if not current["recipe"].get("allow_proposals"):
            raise ProposalError(
                "not_allowed", f"workflow {workflow} does not take proposals (allow_proposals)"
            )
        if base_hash.removeprefix("sha256:") != current["hash"]:
            raise ProposalError(
                "stale",
                f"base {base_hash} is not workflow {workflow}'s current version "
                f"(sha256:{current['hash']})",
            )
        doc = proposed.to_dict()
        if proposed.canonical_hash == current["hash"]:
            raise ProposalError("invalid", "the proposed recipe is the current one")
        risk = assess(current["recipe"], doc)
        return db.fetch_one(
            conn,
            "insert_proposal",
            dict(
                workflow=workflow,
                base_hash=current["hash"],
                proposed=Jsonb(doc),
                proposed_hash=proposed.canonical_hash,
                summary=summary.strip(),
                diff=recipe_diff(current["recipe"], doc, f"{workflow} (current)", "proposed"),
                risk=risk.level,
                risk_reasons=list(risk.reasons),
                proposed_by=actor.label,
                proposed_via=actor.via,
                run_id=run_id,
            ),
        )


def get(conn: psycopg.Connection[Any], proposal_id: int) -> dict[str, Any]:
    row = db.fetch_one(conn, "get_proposal", dict(id=proposal_id))
    if row is None:
        raise ProposalError("not_found", f"no proposal {proposal_id}")
    return row


def list_proposals(conn: psycopg.Connection[Any], workflow: str | None = None) -> list[dict]:
    return db.fetch_all(conn, "list_proposals", dict(workflow=workflow))


def _locked(conn: psycopg.Connection[Any], proposal_id: int) -> dict[str, Any]:
    row = db.fetch_one(conn, "lock_proposal", dict(id=proposal_id))
    if row is None:
        raise ProposalError("not_found", f"no proposal {proposal_id}")
    return row


def review(
    conn: psycopg.Connection[Any], proposal_id: int, approve: bool, actor: Actor, note: str | None
) -> None:
    """Approve or reject an open proposal: an approver's call, and never the proposer's own."""
    if not actor.may("approver"):
        raise ProposalError("refused", f"{actor.name} may not review proposals (needs approver)")
    if not approve and not (note or "").strip():
        raise ProposalError("invalid", "a rejection needs a note saying why")
    with conn.transaction():
        row = _locked(conn, proposal_id)
        problem = _problem(conn, row, ("open",))
        if problem is None and (actor.on_behalf_of or row["proposed_by"] == actor.name):
            raise ProposalError(
                "refused",
                f"proposal {proposal_id} was made by {row['proposed_by']}: someone else reviews it",
            )
        if problem is None:
            conn.execute(
                db.q("review_proposal"),
                dict(
                    id=proposal_id,
                    status="approved" if approve else "rejected",
                    actor=actor.label,
                    note=note,
                ),
            )
    if problem is not None:
        raise problem  # after the commit: an expired proposal stays marked so


def apply(conn: psycopg.Connection[Any], proposal_id: int, actor: Actor) -> int:
    """Apply an approved proposal as a new version (source 'proposal'); its version. A proposal
    whose base is no longer current fails as stale; one past its 14 days, as expired."""
    from .workflows import apply_recipe, get_workflow

    if not actor.may("operator"):
        raise ProposalError("refused", f"{actor.name} may not apply proposals (needs operator)")
    version = 0
    with conn.transaction():
        row = _locked(conn, proposal_id)
        problem = _problem(conn, row, ("approved",))
        current = get_workflow(conn, row["workflow"])
        if problem is None and not current["recipe"].get("allow_proposals"):
            raise ProposalError(
                "not_allowed", f"workflow {row['workflow']} no longer takes proposals"
            )
        if problem is None and current["hash"] != row["base_hash"]:
            conn.execute(db.q("set_proposal_status"), dict(id=proposal_id, status="stale"))
            problem = ProposalError(
                "stale",
                f"proposal {proposal_id} is stale: workflow {row['workflow']} changed since "
                f"(base sha256:{row['base_hash'][:12]}…, now sha256:{current['hash'][:12]}…)",
            )
        if problem is None:
            applied = apply_recipe(conn, Recipe.from_dict(row["proposed"]), source="proposal")
            conn.execute(db.q("proposal_applied"), dict(id=proposal_id, version=applied.version))
            version = applied.version
    if problem is not None:
        raise problem  # after the commit: the proposal stays marked stale or expired
    return version


def _problem(
    conn: psycopg.Connection[Any], row: dict[str, Any], wanted: tuple[str, ...]
) -> ProposalError | None:
    """Why a proposal cannot move on (an expired one is marked so here), or None."""
    if row["status"] in ACTIVE and row["expired"]:
        conn.execute(db.q("set_proposal_status"), dict(id=row["id"], status="expired"))
        return ProposalError("stale", f"proposal {row['id']} expired at {row['expires_at']:%F %T}")
    if row["status"] not in wanted:
        return ProposalError(
            "refused", f"proposal {row['id']} is {row['status']}, not {' or '.join(wanted)}"
        )
    return None
