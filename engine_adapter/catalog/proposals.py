"""Proposals: a change to a workflow that opted in (`allow_proposals: true`) is proposed, with
its base hash, a summary, the diff and a risk level computed by rules; a person other than its
authors reviews it (`review`: the one place any door approves); and applying it re-checks
everything (opt-in, approval, expiry, that the base is still current). A workflow marked
`protected: true` takes a high-risk change only this way: a direct apply of one is refused
(workflows.apply_recipe asks `refuse_direct`).

Risk rules (the highest that any change meets):
- high: a new or changed run_command; any change to a gate (removed, or its `if`, approvers,
  accept, from, timeout, on_timeout, self-approval, or a condition or loop around it); a new or
  changed sub-workflow step; any change to an agent's tools or startable workflows; any change
  to `env`, `workdir`, the network, `limits` (the recipe's or a step's), webhooks (paths,
  secrets, mappings) or `notify`; proposals turned off; protection turned off;
- medium: any other change (to the steps, triggers, outputs, timeouts, retention, …);
- low: only the name or description.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine_adapter.access.authorization import Action, RuleRefusal, change
from engine_adapter.model import domain
from engine_adapter.model.errors import (
    CONTRACT_INVALID,
    CONTRACT_MISMATCH,
    CONTRACT_POLICY,
    Conflict,
    Invalid,
    NotFound,
    Refused,
    ThreadlineError,
)
from engine_adapter.model.identity import Actor, name_of_label
from engine_adapter.model.vocab import ProposalStatus
from engine_adapter.recipes.recipe_text import recipe_diff
from engine_adapter.recipes.recipes import Recipe, step_docs
from engine_adapter.store import db

ACTIVE = (ProposalStatus.OPEN, ProposalStatus.APPROVED)


# A proposal error's kind -> how the doors answer it (HTTP status, contract exit, error type).
_ANSWERS = {
    "invalid": (Invalid.http_status, CONTRACT_INVALID, "invalid_workflow"),
    "not_found": (NotFound.http_status, CONTRACT_INVALID, "workflow_not_found"),
    "stale": (Conflict.http_status, CONTRACT_MISMATCH, "workflow_hash_mismatch"),
    "not_allowed": (Conflict.http_status, CONTRACT_POLICY, "policy_violation"),
    "refused": (Refused.http_status, CONTRACT_POLICY, "policy_violation"),
}


class ProposalError(ThreadlineError):
    """A proposal refused or not applied; the message says why. `kind`: invalid | stale |
    not_allowed | not_found | refused, each answered as _ANSWERS says (one class, since callers
    raise it with the kind as a value)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.http_status, self.contract_exit, self.envelope_type = _ANSWERS[kind]


class AuthorRefused(ProposalError, RuleRefusal):
    """One of a proposal's authors (or someone acting for another) tried to review it."""

    def __init__(self, message: str) -> None:
        super().__init__("refused", message)


@dataclass(frozen=True)
class Risk:
    level: str  # low | medium | high
    reasons: tuple[str, ...]


def _steps(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for _, s in step_docs(doc.get("steps")) if isinstance(s.get("id"), str)}


# What a gate is, besides its question: any change to one of these is a change to the gate.
_GATE_KEYS = (
    "if",
    "approvers",
    "accept",
    "from",
    "timeout",
    "on_timeout",
    "self_approval",
    "not_by_initiator",
)
# A recipe's keys whose every change is high risk: what a step reaches, and who hears of what.
_HIGH_KEYS = {
    "env": "the variables steps get from the environment (env) change",
    "workdir": "where steps work (workdir) changes",
    "network": "the network steps get changes",
    "limits": "the steps' limits change",
    "webhooks": "the webhooks (their paths, secrets or mappings) change",
    "notify": "who is notified of what (notify) changes",
}
_NESTED = ("then", "else", "steps", "repeat", "parallel")  # a block's own step lists
_INSIDE = re.compile(r"\.(then|else|steps|repeat|parallel\.[^.\[]+)\[")


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


def _gate_change(sid: str, old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """How a gate changed (its weakening named where there is one), or None."""
    if why := _gate_weaker(old, new):
        return f"gate {sid} {why}"
    changed = [k for k in _GATE_KEYS if old.get(k) != new.get(k)]
    return f"gate {sid}: {', '.join(changed)} changes" if changed else None


def _guards(doc: dict[str, Any]) -> dict[str, str]:
    """Each gate's blocks around it (their conditions, items and loops, and which of their
    lists holds it), as comparable text: a gate moved under `if: false` is a weaker gate."""
    by_path = dict(step_docs(doc.get("steps")))
    guards = {}
    for path, step in by_path.items():
        if domain.HUMAN_GATE in step and isinstance(step.get("id"), str):
            chain = [
                ({k: v for k, v in by_path[path[: m.start()]].items() if k not in _NESTED}, m[1])
                for m in _INSIDE.finditer(path)
            ]
            guards[step["id"]] = json.dumps(chain, sort_keys=True, default=str)
    return guards


def _step_risks(before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    high: list[str] = []
    for sid, step in after.items():
        was = before.get(sid) or {}
        if domain.RUN_COMMAND in step and was.get(domain.RUN_COMMAND) != step[domain.RUN_COMMAND]:
            high.append(f"step {sid} runs a new command")
        if domain.WORKFLOW in step and was != step:
            high.append(f"step {sid} starts workflow {step[domain.WORKFLOW]} (new or changed)")
        if domain.DISPATCH_TASK in step:
            tools, had = set(step.get("tools") or []), set(was.get("tools") or [])
            if tools - had:
                high.append(f"step {sid} gives its agent {', '.join(sorted(tools - had))}")
            elif tools != had:
                high.append(f"step {sid}'s agent tools change")
            if set(step.get("workflows") or []) != set(was.get("workflows") or []):
                started = ", ".join(sorted(set(step.get("workflows") or []))) or "none"
                high.append(f"step {sid}'s agent may start other workflows (now: {started})")
        if step.get("limits") != was.get("limits"):
            high.append(f"step {sid}'s limits change")
    return high


def _top_change(key: str, old: dict[str, Any], new: dict[str, Any]) -> str:
    """Why a change to one of _HIGH_KEYS is high risk, as specific as it can say."""
    if key == "env" and (wider := set(new.get("env") or []) - set(old.get("env") or [])):
        return f"steps get {', '.join(sorted(wider))} from the environment"
    if key == "network" and old.get("network") is False:
        return "steps get the network"
    if key == "webhooks":
        paths = {w.get("path") for w in new.get("webhooks") or []}
        if added := paths - {w.get("path") for w in old.get("webhooks") or []}:
            return f"new webhook {', '.join(sorted(map(str, added)))}"
    return _HIGH_KEYS[key]


def assess(old: dict[str, Any], new: dict[str, Any]) -> Risk:
    """The risk of changing recipe old into new, with the reasons (the rules above)."""
    before, after = _steps(old), _steps(new)
    high = _step_risks(before, after)
    old_guards, new_guards = _guards(old), _guards(new)
    for sid, step in before.items():
        if domain.HUMAN_GATE in step:
            now = after.get(sid)
            if now is None or domain.HUMAN_GATE not in now:
                high.append(f"gate {sid} is removed")
            elif why := _gate_change(sid, step, now):
                high.append(why)
            elif old_guards.get(sid) != new_guards.get(sid):
                high.append(f"gate {sid} now runs under other conditions or loops")
    high += [_top_change(key, old, new) for key in _HIGH_KEYS if old.get(key) != new.get(key)]
    if old.get("allow_proposals") and not new.get("allow_proposals"):
        high.append("proposals are turned off")
    if old.get("protected") and not new.get("protected"):
        high.append("the workflow is no longer protected")
    if high:
        return Risk("high", tuple(dict.fromkeys(high)))
    rest = {k for k in set(old) | set(new) if old.get(k) != new.get(k)} - {"name", "description"}
    if rest:
        return Risk("medium", tuple(f"{k} changes" for k in sorted(rest)))
    return Risk("low", ("only the name or description changes",))


def refuse_direct(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why a protected workflow's recipe old may not become new without a reviewed proposal (a
    high-risk change), else None."""
    if not old.get("protected"):
        return None
    risk = assess(old, new)
    if risk.level != "high":
        return None
    return (
        f"workflow {new.get('slug')} is protected: a high-risk change ({'; '.join(risk.reasons)}) "
        "is made only through a proposal that someone other than its author approved "
        "(threadline propose, then proposal approve and apply)"
    )


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
    from engine_adapter.catalog.workflows import WorkflowNotFound, get_workflow, written_text

    if not summary.strip():
        raise ProposalError("invalid", "summary: say what the change is for")
    if proposed.slug != workflow:
        raise ProposalError(
            "invalid", f"the proposed recipe is workflow {proposed.slug!r}, not {workflow!r}"
        )
    with change(conn, actor, Action.PROPOSE, workflow=workflow, run_id=run_id):
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
        row = dict(
            workflow=workflow,
            base_hash=current["hash"],
            proposed=doc,
            proposed_hash=proposed.canonical_hash,
            summary=summary.strip(),
            # As written on both sides: the current version's text, the proposal's own.
            diff=recipe_diff(
                written_text(conn, workflow, current["version"]),
                doc if proposed.text is None else proposed.text,
                f"{workflow} (current)",
                "proposed",
            ),
            risk=risk.level,
            risk_reasons=list(risk.reasons),
            proposed_by=actor.label,
            proposed_via=actor.via,
            run_id=run_id,
            proposed_text=proposed.text,
        )
        return db.fetch_row(conn, "insert_proposal", dict(row=Jsonb(row)))


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


def authors(conn: psycopg.Connection[Any], row: dict[str, Any]) -> set[str]:
    """Who stands behind a proposal: the account that made it (whatever door or token it came
    through) and, for an agent's proposal, the person who started the run whose step made it."""
    people = {name_of_label(row["proposed_by"])}
    if row["run_id"] is not None:
        started = db.fetch_one(conn, "run_initiator", dict(run_id=row["run_id"]))
        if started is not None and started["caller"]:
            people.add(name_of_label(started["caller"]))
    return people


def review(
    conn: psycopg.Connection[Any], proposal_id: int, approve: bool, actor: Actor, note: str | None
) -> None:
    """Approve or reject an open proposal: an approver's call, never one of its authors' (through
    any door or token), nor one recorded for someone else."""
    if not approve and not (note or "").strip():
        raise ProposalError("invalid", "a rejection needs a note saying why")
    target = dict(detail={"proposal": proposal_id, "approve": approve})
    with change(conn, actor, Action.REVIEW_PROPOSAL, **target):
        row = _locked(conn, proposal_id)
        problem = _problem(conn, row, (ProposalStatus.OPEN,))
        if problem is None and (actor.on_behalf_of or actor.name in authors(conn, row)):
            made = f"proposal {proposal_id} was made by {row['proposed_by']}"
            if actor.name != name_of_label(row["proposed_by"]) and row["run_id"]:
                made += f" in a run {actor.name} started"
            raise AuthorRefused(f"{made}: someone else reviews it")
        if problem is None:
            conn.execute(
                db.q("review_proposal"),
                dict(
                    id=proposal_id,
                    status=ProposalStatus.APPROVED if approve else ProposalStatus.REJECTED,
                    actor=actor.label,
                    note=note,
                ),
            )
    if problem is not None:
        raise problem  # after the commit: an expired proposal stays marked so


def apply(conn: psycopg.Connection[Any], proposal_id: int, actor: Actor) -> int:
    """Apply an approved proposal as a new version (source 'proposal'); its version. A proposal
    whose base is no longer current fails as stale; one past its 14 days, as expired."""
    from engine_adapter.catalog.workflows import apply_recipe, get_workflow

    version = 0
    with change(conn, actor, Action.APPLY_PROPOSAL, detail={"proposal": proposal_id}):
        row = _locked(conn, proposal_id)
        problem = _problem(conn, row, (ProposalStatus.APPROVED,))
        current = get_workflow(conn, row["workflow"])
        if problem is None and not current["recipe"].get("allow_proposals"):
            raise ProposalError(
                "not_allowed", f"workflow {row['workflow']} no longer takes proposals"
            )
        if problem is None and current["hash"] != row["base_hash"]:
            conn.execute(
                db.q("set_proposal_status"), dict(id=proposal_id, status=ProposalStatus.STALE)
            )
            problem = ProposalError(
                "stale",
                f"proposal {proposal_id} is stale: workflow {row['workflow']} changed since "
                f"(base sha256:{row['base_hash'][:12]}…, now sha256:{current['hash'][:12]}…)",
            )
        if problem is None:
            proposed = replace(Recipe.from_dict(row["proposed"]), text=row["proposed_text"])
            applied = apply_recipe(conn, proposed, source="proposal")
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
        conn.execute(db.q("set_proposal_status"), dict(id=row["id"], status=ProposalStatus.EXPIRED))
        return ProposalError("stale", f"proposal {row['id']} expired at {row['expires_at']:%F %T}")
    if row["status"] not in wanted:
        return ProposalError(
            "refused", f"proposal {row['id']} is {row['status']}, not {' or '.join(wanted)}"
        )
    return None
