"""Who may do what: the one place that decides. Every state change a person can make, through
any door (the CLI, the console, the HTTP API, the envelope commands, a resume link), names an
`Action`; `RULES` says which roles (any one of them) or whether an admin it needs, and
`authorize` (or `change`, which wraps the change's transaction) says yes or raises `Refused`,
naming who, what and why. The doors take their role requirements from `RULES` too (the console's
buttons, the API's routes), so there is no second list.

Every refusal is audited in threadline.authorization_audit (migration 036), and so is every
change a person was allowed, in the change's own transaction. Threadline itself (the system
actor: the conductor's child runs, schedule ticks, timeouts) is never asked and never audited;
nor are the ingress's doors (a resume link, a webhook), which hold no table write: a link's
decision and its refusals are audited in decision_audit, in the transaction that used the token.

The rules of a thing itself stay with it (a gate's approvers and self-approval in gates.py, a
proposal's authors in proposals.py, an approver replying only at a gate): they raise a
`RuleRefusal`, which `change` audits as a refusal of the action after the change rolled back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine_adapter.model import errors
from engine_adapter.model.identity import Actor
from engine_adapter.model.vocab import Door
from engine_adapter.store import db


class Action(StrEnum):
    SPAWN = "spawn"
    EMIT_EVENT = "emit_event"
    DEBUG_EVENT = "debug_event"
    REPLY = "reply"
    STEER = "steer"
    DECIDE = "decide"
    CANCEL = "cancel"
    RETRY = "retry"
    RERUN = "rerun"
    APPLY_RECIPE = "apply_recipe"
    ROLLBACK = "rollback"
    ENABLE_WORKFLOW = "enable_workflow"
    PROPOSE = "propose"
    REVIEW_PROPOSAL = "review_proposal"
    APPLY_PROPOSAL = "apply_proposal"
    CONFIGURE_BOTS = "configure_bots"
    SET_PRICE = "set_price"
    SET_LIMITS = "set_limits"
    SET_RETENTION = "set_retention"
    PAUSE = "pause"
    CLEANUP = "cleanup"
    STOP_CONDUCTOR = "stop_conductor"
    MINT_TOKEN = "mint_token"
    REVOKE_TOKEN = "revoke_token"
    MANAGE_ACCOUNTS = "manage_accounts"
    MANAGE_CHANNELS = "manage_channels"


OPERATOR, APPROVER = "operator", "approver"
ADMIN_REASON = "that is an admin action (root, or the account that owns the install)"


@dataclass(frozen=True)
class Rule:
    verb: str  # what the refusal says may not be done: "cancel a run"
    roles: tuple[str, ...] = ()  # any one of them; () = any authenticated identity
    admin: bool = False  # an admin's only
    admin_for_others: bool = False  # for another account than the actor's own: an admin's


# The one table. A door that assigns no roles (the CLI's OS account) holds every role; admin is
# the CLI's root or install owner only.
RULES: dict[Action, Rule] = {
    Action.SPAWN: Rule("spawn a run", (OPERATOR,)),
    Action.EMIT_EVENT: Rule("deliver an event", (OPERATOR,)),
    Action.DEBUG_EVENT: Rule("emit an event", (OPERATOR,)),
    Action.REPLY: Rule("reply", (OPERATOR, APPROVER)),
    # A reply while the run waits at no gate steers it (an agent reads it): an operator's act.
    Action.STEER: Rule("reply to a run waiting at no gate", (OPERATOR,)),
    Action.DECIDE: Rule("decide a gate", (APPROVER,)),
    Action.CANCEL: Rule("cancel a run", (OPERATOR,)),
    Action.RETRY: Rule("retry a run", (OPERATOR,)),
    Action.RERUN: Rule("rerun a run", (OPERATOR,)),
    Action.APPLY_RECIPE: Rule("apply a recipe", (OPERATOR,)),
    Action.ROLLBACK: Rule("roll back a recipe", (OPERATOR,)),
    Action.ENABLE_WORKFLOW: Rule("enable or disable a workflow", (OPERATOR,)),
    Action.PROPOSE: Rule("propose a change", (OPERATOR,)),
    Action.REVIEW_PROPOSAL: Rule("review proposals", (APPROVER,)),
    Action.APPLY_PROPOSAL: Rule("apply proposals", (OPERATOR,)),
    Action.CONFIGURE_BOTS: Rule("configure agent bots", (OPERATOR,)),
    Action.SET_PRICE: Rule("set model prices", (OPERATOR,)),
    Action.SET_LIMITS: Rule("set concurrency limits", (OPERATOR,)),
    Action.SET_RETENTION: Rule("set retention", (OPERATOR,)),
    Action.PAUSE: Rule("pause or unpause new runs", (OPERATOR,)),
    Action.CLEANUP: Rule("clean up old runs", (OPERATOR,)),
    Action.STOP_CONDUCTOR: Rule("kill the conductor", (OPERATOR,)),
    Action.MINT_TOKEN: Rule("mint an API token", (OPERATOR,), admin_for_others=True),
    Action.REVOKE_TOKEN: Rule("revoke an API token", (OPERATOR,), admin_for_others=True),
    Action.MANAGE_ACCOUNTS: Rule("add or remove accounts", admin=True),
    Action.MANAGE_CHANNELS: Rule("change an account's channels", admin_for_others=True),
}

# Doors whose actions are not audited here: Threadline itself, and the ingress's (which holds no
# table write; decision_audit records a link's decisions in the token's own transaction).
UNAUDITED_DOORS = (Door.SYSTEM, Door.LINK, Door.WEBHOOK)


class Refused(errors.Refused):
    """The actor may not do this; nothing was changed, and the refusal was audited."""

    def __init__(self, message: str, action: Action | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.action = action
        self.reason = reason or message


class RuleRefusal(errors.Refused):
    """A mixin for a refusal by a thing's own rule of who (a gate's approvers, a proposal's
    authors): `change` audits it as a refusal of its action."""


def roles_for(action: Action) -> tuple[str, ...]:
    """The roles (any one of them) action needs: what doors show and check before a call."""
    return RULES[action].roles


def _own(actor: Actor, account: str | None) -> bool:
    return account is None or (
        account == actor.name and actor.on_behalf_of is None and actor.minted_by is None
    )


def why_not(actor: Actor, action: Action, *, account: str | None = None) -> str | None:
    """Why actor may not do action (for account, where the action names one); None: it may."""
    rule = RULES[action]
    if rule.admin or (rule.admin_for_others and not _own(actor, account)):
        if not actor.admin:
            return ADMIN_REASON
    if rule.roles and actor.roles is not None and not set(rule.roles) & actor.roles:
        return f"that needs the {' or '.join(rule.roles)} role"
    return None


def who(actor: Actor) -> str:
    """How a refusal names the actor: its name, its roles where its door assigns them, and for
    whom and by whose token it acts: "dash (viewer), via a token minted by root"."""
    held = f" ({', '.join(sorted(actor.roles)) or 'no role'})" if actor.roles is not None else ""
    return actor.label.replace(actor.name, actor.name + held, 1)


def message(actor: Actor, action: Action, reason: str, verb: str | None = None) -> str:
    return f"{who(actor)} may not {verb or RULES[action].verb}: {reason}"


def record(
    conn: psycopg.Connection[Any],
    actor: Actor,
    action: Action,
    outcome: str,
    reason: str | None = None,
    *,
    run_id: str | None = None,
    workflow: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """One row of threadline.authorization_audit, in conn's transaction where one is open (so
    an allowed change and its row commit together), else on its own."""
    if actor.via in UNAUDITED_DOORS:
        return
    conn.execute(
        db.q("insert_authorization_audit"),
        dict(
            actor=actor.name,
            account_id=actor.account_id,
            label=actor.label,
            door=actor.via,
            action=str(action),
            run_id=str(run_id) if run_id else None,
            workflow=workflow,
            detail=Jsonb(detail) if detail else None,
            outcome=outcome,
            reason=reason,
        ),
    )


def refuse(
    conn: psycopg.Connection[Any],
    actor: Actor,
    action: Action,
    reason: str,
    **target: Any,
) -> None:
    """Audit a refusal and raise it: Refused, naming who, what and why."""
    record(conn, actor, action, "refused", reason, **target)
    raise Refused(message(actor, action, reason), action, reason)


def authorize(
    conn: psycopg.Connection[Any],
    actor: Actor,
    action: Action,
    *,
    run_id: str | None = None,
    workflow: str | None = None,
    detail: dict[str, Any] | None = None,
    account: str | None = None,
) -> None:
    """Yes (returns; a person's allowed change is audited in conn's open transaction, so call
    it inside the change's) or no (Refused, audited). A refusal's row commits only if conn
    has no transaction open: call it first, or use `change`."""
    where = _checked(conn, actor, action, Target(run_id, workflow, detail, account))
    present(conn, actor, action, account)
    record(conn, actor, action, "allowed", **where)


@contextmanager
def change(
    conn: psycopg.Connection[Any], actor: Actor, action: Action, **target: Any
) -> Iterator[None]:
    """The change's transaction, authorized (target: authorize's keywords): a refusal by the
    rules is audited on its own and nothing is written; an allowed change by a person is audited
    in its transaction; a thing's own rule refusing inside it (a RuleRefusal) is audited after
    the change rolled back."""
    where = _checked(conn, actor, action, Target(**target))
    try:
        with conn.transaction():
            present(conn, actor, action, target.get("account"))
            record(conn, actor, action, "allowed", **where)
            yield
    except RuleRefusal as err:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            record(conn, actor, action, "refused", str(err), **where)
        raise


def present(
    conn: psycopg.Connection[Any], actor: Actor, action: Action, account: str | None = None
) -> None:
    """Show the database the credential the actor's door was shown, in the change's
    transaction: threadline.authenticate (migration 045) finds its person and checks RULES
    again, and the writing functions the console's login calls then act only for that person.
    A refusal there (expired, signed out, revoked, no such role) is Refused here too."""
    if actor.credential is None:
        return
    try:
        with conn.transaction():  # a savepoint: the refusal leaves the change's transaction
            conn.execute(
                db.q("authenticate"),
                dict(credential=actor.credential, action=str(action), account=account),
            )
    except psycopg.errors.InsufficientPrivilege as err:
        reason = err.diag.message_primary or str(err)
        raise Refused(reason, action, reason.partition(": ")[2] or reason) from None


def sync_rules(conn: psycopg.Connection[Any]) -> None:
    """Copy RULES into threadline.action_rules, where the database's checked functions read
    them (migration 045): the migrate step calls it, so the table is never written by hand."""
    rows = [
        dict(
            action=str(action),
            verb=rule.verb,
            roles=list(rule.roles),
            admin=rule.admin,
            admin_for_others=rule.admin_for_others,
        )
        for action, rule in RULES.items()
    ]
    conn.execute(db.q("upsert_action_rules"), dict(rules=Jsonb(rows)))


@dataclass(frozen=True)
class Target:
    """What an action is done to, as the audit records it."""

    run_id: str | None = None
    workflow: str | None = None
    detail: dict[str, Any] | None = None
    account: str | None = None  # the account an action for oneself or (admin) another names


def _checked(
    conn: psycopg.Connection[Any], actor: Actor, action: Action, target: Target
) -> dict[str, Any]:
    """The target as record takes it, once the rules allow the action (else Refused)."""
    detail = target.detail
    if target.account is not None:
        detail = (detail or {}) | {"account": target.account}
    where = dict(run_id=target.run_id, workflow=target.workflow, detail=detail)
    why = why_not(actor, action, account=target.account)
    if why:
        refuse(conn, actor, action, why, **where)
    return where


def transaction(
    conn: psycopg.Connection[Any], actor: Actor | None, action: Action, **target: Any
) -> AbstractContextManager[Any]:
    """The change's transaction: authorized (`change`) where a person's door passed its actor,
    a plain one where Threadline itself makes the change (actor None)."""
    return conn.transaction() if actor is None else change(conn, actor, action, **target)


def audit_since(conn: psycopg.Connection[Any], after: int = 0) -> list[dict[str, Any]]:
    return db.fetch_all(conn, "authorization_audit_since", dict(after=after))
