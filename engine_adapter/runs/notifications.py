"""The notification outbox's writes: a row per rule and target when a gate opens or a run fails
(inside the transaction that writes the event), and the sweep that finds gates waiting longer
than a rule's `after`. notifier.py delivers the rows.

A rule's `to:` accounts get a row per channel they registered, with the account as its subject
(its resume links decide as it); a webhook or email target gets one with no subject: no links."""

from __future__ import annotations

from typing import Any

import psycopg

from engine_adapter.access import accounts
from engine_adapter.model.vocab import NotifyEvent
from engine_adapter.recipes.notify_spec import NotifyRule
from engine_adapter.store import db


def enqueue(
    conn: psycopg.Connection[Any],
    run_id: str,
    recipe: dict[str, Any],
    event: str,
    event_key: str,
    text: str,
    only_rule: int | None = None,
) -> int:
    """Outbox rows for an event, one per matching rule and target; a replay writes none twice.
    Returns how many rules matched."""
    matched = 0
    for i, raw in enumerate(recipe.get("notify") or []):
        rule = NotifyRule.from_dict(raw)
        if event not in rule.when or (only_rule is not None and i != only_rule):
            continue
        matched += 1
        targets: list[tuple[str, str, str | None]] = []
        targets += [("webhook", rule.webhook, None)] if rule.webhook else []
        targets += [("email", address, None) for address in rule.email]
        if rule.to:
            targets += [
                (c["channel"], c["target"], c["name"]) for c in accounts.channels_of(conn, rule.to)
            ]
        for channel, target, subject in targets:
            conn.execute(
                db.q("enqueue_notification"),
                dict(
                    run_id=run_id,
                    event=event,
                    event_key=event_key,
                    rule=i,
                    channel=channel,
                    target=target,
                    subject=subject,
                    text=text,
                ),
            )
    return matched


def sweep_waiting(conn: psycopg.Connection[Any]) -> int:
    """Gates that have waited longer than a `waiting` rule's `after`: that rule's rows."""
    found = 0
    for gate in db.fetch_all(conn, "gates_waiting"):
        for i, raw in enumerate(gate["notify"] or []):
            rule = NotifyRule.from_dict(raw)
            if (
                NotifyEvent.WAITING in rule.when
                and rule.after_s is not None
                and gate["waited_s"] >= (rule.after_s)
            ):
                with conn.transaction():
                    text = f"Still waiting for a decision: {gate['text']}"
                    found += enqueue(
                        conn,
                        str(gate["run_id"]),
                        {"notify": gate["notify"]},
                        NotifyEvent.WAITING,
                        gate["await_key"],
                        text,
                        only_rule=i,
                    )
    return found
