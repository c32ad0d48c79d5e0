"""Human gates: replies and decisions on the gate a run waits at, and a gate's timeout.

Every write that can release a gate happens in one transaction that appends the entry, records
the decision, emits the step's done event (first write wins) and NOTIFYs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from engine_adapter.access import accounts
from engine_adapter.access.authorization import (
    Action,
    RuleRefusal,
    change,
    message,
    record,
    why_not,
)
from engine_adapter.model.domain import DISPATCH_TASK, PERSON_DECISIONS, decision_result
from engine_adapter.model.errors import Conflict, Invalid, Refused
from engine_adapter.model.identity import SYSTEM, Actor, name_of_label
from engine_adapter.model.names import step_id_of
from engine_adapter.model.vocab import AuthorKind, AwaitKind, Door, EntryKind, GateDecision
from engine_adapter.recipes.recipes import find_step_doc
from engine_adapter.runs.run_state import emit_step_done, lock_run
from engine_adapter.runs.thread_entries import append, by_person, system_note
from engine_adapter.store import db

APPROVE_WORDS = ("👍", "approve")
DENY_WORDS = ("👎", "deny")


class DecisionRefused(Conflict):
    """A decision that was not taken; nothing was written."""


class GateClosed(DecisionRefused):
    """A decision for a gate that is not (or no longer) open."""


class NotDecider(DecisionRefused, RuleRefusal):
    """The gate's own rules refuse this actor (approvers, self-approval, a reply that would steer
    a run at no gate): audited by the authorization layer too."""


def current_gate(run: dict[str, Any]) -> dict[str, Any] | None:
    """The gate the run is parked at, or None: a human_gate step, or an agent step's ask_human
    question, which any reply answers (from anyone who may decide gates)."""
    if not (run["awaiting"] and run["await_kind"] == AwaitKind.GATE):
        return None
    step = find_step_doc(run["recipe"], step_id_of(run["current_step"] or ""))
    if step is not None and DISPATCH_TASK in step:
        return {"id": step["id"], "accept": "any_reply", "on_timeout": "deny", "asks": True}
    return step


@dataclass(frozen=True)
class ReplyOutcome:
    seq: int
    decision: str | None  # approve | deny | reply when the reply released the gate
    hint: str | None  # what System answered when the reply decided nothing


def reply(conn: psycopg.Connection[Any], run_id: str, text: str, actor: Actor) -> ReplyOutcome:
    """A human reply: always kept in the thread; it releases an open gate when it decides it."""
    if not text.strip():
        raise Invalid("reply text is empty")
    with change(conn, actor, Action.REPLY, run_id=run_id):
        run = lock_run(conn, run_id)
        gate = current_gate(run)
        if gate is None and why_not(actor, Action.STEER):
            # A reply at no gate steers the run (an agent reads it): an operator's act; an
            # approver replies only to answer a gate.
            raise NotDecider(
                f"{actor.name} may reply only while the run waits at a gate: a reply at any "
                "other time steers the run, which needs the operator role"
            )
        if gate:
            actor = accounts.resolved(conn, actor)
        decision = _decision_from_reply(conn, gate, text, actor) if gate else None
        refusal = _why_not_decider(conn, gate, run, actor) if gate and decision else None
        # The gate's answer, or else steering for an agent.
        answered = {"answered": run["await_key"]} if decision and not refusal else {}
        seq = by_person(conn, run_id, actor, EntryKind.MESSAGE, text, data=answered)
        assert seq is not None  # None only for a dedupe_key seen before
        if gate is None:
            return ReplyOutcome(seq, None, None)
        if refusal:  # a decision in words by someone who may not decide: audited
            assert decision is not None  # only a decision is refused
            audit(conn, run_id, run["await_key"], actor, decision, None, DecisionRefused(refusal))
            record(conn, actor, Action.DECIDE, "refused", refusal, run_id=run_id)
        if decision is None or refusal:
            hint = f"Noted. {refusal}." if refusal else _gate_hint(conn, gate, actor)
            system_note(conn, run_id, hint, step_key=run["await_key"])
            db.notify(conn, run_id, "thread")
            return ReplyOutcome(seq, None, hint)
        _record_decision(conn, run, decision, actor, text)
        audit(conn, run_id, run["await_key"], actor, decision, text)
        return ReplyOutcome(seq, decision, None)


def decide(
    conn: psycopg.Connection[Any],
    run_id: str,
    decision: str,
    actor: Actor,
    reason: str | None = None,
    *,
    gate_key: str | None = None,
) -> str:
    """Approve or deny the gate the run waits at; returns the gate's step key.

    Raises GateClosed (and writes nothing) when the run waits at no gate or gate_key names a
    gate that is no longer open; DecisionRefused when the actor may not decide it (not among
    its approvers, acting for someone else, or the run's initiator unless the gate allows
    self-approval).
    """
    if decision not in PERSON_DECISIONS:
        raise Invalid(f"decision must be approve or deny, not {decision!r}")
    try:
        return _decide(conn, run_id, decision, actor, reason, gate_key)
    except (DecisionRefused, Refused) as err:  # Refused: authorization's
        # Audited in a transaction of its own, unless the caller's (a resume token's) is open:
        # the caller's rollback would take the row with it, so the caller audits.
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            with conn.transaction():
                audit(conn, run_id, gate_key, actor, decision, reason, err)
        raise


def _decide(
    conn: psycopg.Connection[Any],
    run_id: str,
    decision: str,
    actor: Actor,
    reason: str | None,
    gate_key: str | None,
) -> str:
    with change(conn, actor, Action.DECIDE, run_id=run_id):
        run = lock_run(conn, run_id)
        gate = current_gate(run)
        if gate is None:
            raise GateClosed(f"run {run_id} is not waiting at a gate (state: {run['state']})")
        if gate_key is not None and gate_key != run["await_key"]:
            raise GateClosed(
                f"gate {gate_key} is no longer open; run {run_id} waits at {run['await_key']}"
            )
        actor = accounts.resolved(conn, actor)
        refusal = _why_not_decider(conn, gate, run, actor)
        if refusal:
            raise NotDecider(refusal)
        text = f"{'👍 approved' if decision == GateDecision.APPROVE else '👎 denied'}" + (
            f": {reason}" if reason else ""
        )
        by_person(
            conn,
            run_id,
            actor,
            EntryKind.DECISION,
            text,
            step_key=run["await_key"],
            data={"decision": decision, "reason": reason},
        )
        _record_decision(conn, run, decision, actor, reason)
        audit(conn, run_id, run["await_key"], actor, decision, reason)
        return run["await_key"]


def audit(
    conn: psycopg.Connection[Any],
    run_id: str | None,
    gate_key: str | None,
    actor: Actor | None,
    decision: str,
    reason: str | None,
    refused: Exception | None = None,
    via: str | None = None,
) -> None:
    """One decision attempt in threadline.decision_audit: who (the authenticated identity and
    its account; none for an unknown credential), how (the door), when, what, why it was
    refused, and who minted the token of a delegated one."""
    conn.execute(
        db.q("insert_decision_audit"),
        dict(
            run_id=run_id,
            gate_key=gate_key,
            actor=actor.name if actor else None,
            account_id=actor.account_id if actor else None,
            minted_by=actor.minted_by if actor else None,
            via=actor.via if actor else via,
            decision=decision,
            reason=reason,
            outcome="refused" if refused else "decided",
            why=str(refused) if refused else None,
        ),
    )


def time_out_gate(conn: psycopg.Connection[Any], run_id: str, step_key: str) -> bool:
    """Record a timeout for a gate still open at step_key; False if a human decided first."""
    with conn.transaction():
        run = lock_run(conn, run_id)
        gate = current_gate(run)
        if gate is None or run["await_key"] != step_key:
            return False
        append(
            conn,
            run_id,
            AuthorKind.SYSTEM,
            "threadline",
            EntryKind.DECISION,
            f"Gate {gate['id']} timed out; taking its on_timeout path: "
            f"{gate.get('on_timeout', 'deny')}.",
            step_key=step_key,
            data={"decision": GateDecision.TIMEOUT},
        )
        _record_decision(conn, run, GateDecision.TIMEOUT, SYSTEM, gate.get("on_timeout", "deny"))
        return True


def _record_decision(
    conn: psycopg.Connection[Any],
    run: dict[str, Any],
    decision: str,
    actor: Actor,
    text: str | None,
) -> None:
    key = run["await_key"]
    row = db.fetch_one(
        conn,
        "insert_decision",
        dict(
            step_key=key,
            run_id=run["run_id"],
            decision=decision,
            reason=text,
            actor=actor.name,
            via=actor.via,
            on_behalf_of=actor.on_behalf_of,
            account_id=actor.account_id,
            minted_by=actor.minted_by,
        ),
    )
    if row is None:
        raise GateClosed(f"gate {key} was decided already")
    payload = decision_result(decision, actor.label, text, row["created_at"])
    emit_step_done(conn, str(run["run_id"]), key, payload)


def _why_not_decider(
    conn: psycopg.Connection[Any], gate: dict[str, Any], run: dict[str, Any], actor: Actor
) -> str | None:
    """Why the actor may not decide this gate, or None when it may."""
    role = why_not(actor, Action.DECIDE)
    if role:
        return message(actor, Action.DECIDE, role, "decide gates")
    if (
        actor.account_id is None
        and actor.via != Door.SYSTEM
        and accounts.was_removed(conn, actor.name)
    ):
        return f"account {actor.name} was removed; an admin may add it again (threadline user add)"
    approvers = gate.get("approvers") or []
    if approvers and not accounts.is_one_of(conn, actor, approvers):
        if actor.on_behalf_of:
            return (
                f"{actor.label}: a decision for someone else cannot satisfy gate {gate['id']}'s "
                f"approvers ({', '.join(approvers)}); "
                f"{actor.on_behalf_of} must decide as themselves"
            )
        return (
            f"{actor.name} is not an approver of gate {gate['id']} "
            f"(approvers: {', '.join(approvers)}; each names an account)"
        )
    # Self-approval: the person who started the run (its top-level run's) may not decide its
    # gates unless the gate says so. An agent's question is no gate of the recipe's: its
    # initiator answers it.
    if not (gate.get("asks") or gate.get("self_approval")) and actor.name == _initiator(conn, run):
        return (
            f"{actor.name} started this run, so may not decide gate {gate['id']}: it needs "
            "someone else (the gate allows its initiator only with self_approval: true)"
        )
    return None


def _initiator(conn: psycopg.Connection[Any], run: dict[str, Any]) -> str | None:
    """Who started the run's tree: the caller of its top-level run's trigger (None: no one),
    the actor itself where the trigger keeps a label ("root for alice" from a rerun --as)."""
    if run.get("parent_run_id") is None:
        caller = (run.get("trigger") or {}).get("caller")
    else:
        row = db.fetch_one(conn, "run_initiator", dict(run_id=run["run_id"]))
        caller = None if row is None else row["caller"]
    return None if caller is None else name_of_label(caller)


def _decision_from_reply(
    conn: psycopg.Connection[Any], gate: dict[str, Any], text: str, actor: Actor
) -> GateDecision | None:
    if gate.get("accept") == "any_reply":
        wanted = gate.get("from")
        return (
            GateDecision.REPLY
            if wanted is None or accounts.is_one_of(conn, actor, [wanted])
            else None
        )
    # A 👍 from someone who is not an approver is still a decision attempt: refused (and
    # audited) by _why_not_decider, with the reason as the thread's hint.
    lowered = text.strip().lower()
    if lowered.startswith(APPROVE_WORDS):
        return GateDecision.APPROVE
    if lowered.startswith(DENY_WORDS):
        return GateDecision.DENY
    return None


def _gate_hint(conn: psycopg.Connection[Any], gate: dict[str, Any], actor: Actor) -> str:
    if gate.get("accept") == "any_reply":
        return f"Noted. Gate {gate['id']} waits for a reply from {gate.get('from')}."
    approvers = gate.get("approvers") or []
    if approvers and not accounts.is_one_of(conn, actor, approvers):
        return f"Noted. Only {', '.join(approvers)} can decide gate {gate['id']}."
    return (
        f'Noted. Gate {gate["id"]} is still waiting: reply starting with 👍 or "approve" to '
        f'continue, 👎 or "deny" to stop (or `threadline approve` / `threadline deny`).'
    )
