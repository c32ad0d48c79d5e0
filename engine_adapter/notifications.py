"""The notification outbox's writes: a row per rule and target when a gate opens or a run fails
(inside the transaction that writes the event), and the sweep that finds gates waiting longer
than a rule's `after`. notifier.py delivers the rows."""

from __future__ import annotations

from typing import Any

import psycopg

from . import db
from .notify_spec import NotifyRule


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
        targets = [("webhook", rule.webhook)] if rule.webhook else []
        targets += [("email", address) for address in rule.email]
        for channel, target in targets:
            assert target is not None
            subject = rule.subject or (target if channel == "email" else f"webhook-{i}")
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
                "waiting" in rule.when
                and rule.after_s is not None
                and gate["waited_s"] >= (rule.after_s)
            ):
                with conn.transaction():
                    text = f"Still waiting for a decision: {gate['text']}"
                    found += enqueue(
                        conn,
                        str(gate["run_id"]),
                        {"notify": gate["notify"]},
                        "waiting",
                        gate["await_key"],
                        text,
                        only_rule=i,
                    )
    return found
