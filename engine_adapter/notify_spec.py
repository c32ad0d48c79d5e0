"""A recipe's `notify:` rules: who hears of a gate opening, a run failing, or a gate waiting too
long, and how (an outgoing webhook with Slack-compatible JSON, or email). Pure Python, no
database; notifications.py writes the outbox, notifier.py delivers it.

A webhook URL is written literally or named as `env:THREADLINE_<NAME>` (read by the conductor):
Threadline's own variables never reach a step, so a secret URL stays out of every command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .recipe_values import format_duration, parse_duration, quote

EVENTS = ("gate", "failed", "waiting")  # a gate opens; the run fails; a gate waits past `after`
KEYS = ("when", "webhook", "email", "after", "as")
MAX_RULES = 20
MAX_ADDRESSES = 50
_URL = re.compile(r"https?://[^\s]{1,2000}")
_ENV_URL = re.compile(r"env:(THREADLINE_[A-Z0-9_]{1,100})")
_EMAIL = re.compile(r"[^@\s]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,63}")
_SUBJECT = re.compile(r"[A-Za-z0-9_.@-]{1,100}")


@dataclass(frozen=True)
class NotifyRule:
    when: tuple[str, ...]
    webhook: str | None = None  # a URL, or env:THREADLINE_NAME
    email: tuple[str, ...] = ()
    after_s: float | None = None  # `waiting`: how long a gate waits before this rule speaks
    subject: str | None = None  # `as`: whom its resume links decide as (default: the target)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"when": list(self.when)}
        if self.webhook is not None:
            d["webhook"] = self.webhook
        if self.email:
            d["email"] = list(self.email)
        if self.after_s is not None:
            d["after"] = format_duration(self.after_s)
        if self.subject is not None:
            d["as"] = self.subject
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NotifyRule:
        errors: list[str] = []
        rule = _parse_rule(d, "notify[]", errors)
        if rule is None:
            raise ValueError("; ".join(errors))
        return rule


def parse_notify(raw: Any, errors: list[str]) -> tuple[NotifyRule, ...]:
    """Validate a recipe's `notify` list; problems go to errors as "notify[i].key: ..."."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_RULES:
        errors.append(f"notify: {quote(raw)[:60]} must be a list of at most {MAX_RULES} rules")
        return ()
    rules = [_parse_rule(d, f"notify[{i}]", errors) for i, d in enumerate(raw)]
    return tuple(r for r in rules if r is not None)


def _parse_rule(d: Any, where: str, errors: list[str]) -> NotifyRule | None:
    if not isinstance(d, dict):
        errors.append(f"{where}: must be a mapping with when and webhook or email")
        return None
    n = len(errors)
    errors += [
        f"{where}.{k}: unknown field (allowed: {', '.join(KEYS)})" for k in d if k not in KEYS
    ]
    when = d.get("when")
    if not isinstance(when, list) or not when or any(w not in EVENTS for w in when):
        errors.append(f"{where}.when: {quote(when)} must be a list of {', '.join(EVENTS)}")
        when = []
    webhook, email = d.get("webhook"), d.get("email")
    if (webhook is None) == (email is None):
        errors.append(f"{where}: give exactly one of webhook and email")
    if webhook is not None and not (
        isinstance(webhook, str) and (_URL.fullmatch(webhook) or _ENV_URL.fullmatch(webhook))
    ):
        errors.append(
            f"{where}.webhook: {quote(webhook)[:80]} must be an http(s) URL or "
            "env:THREADLINE_NAME (a variable of the conductor's that no step ever receives)"
        )
    if email is not None:
        if isinstance(email, str):
            email = [email]
        if not isinstance(email, list) or not 1 <= len(email) <= MAX_ADDRESSES:
            errors.append(f"{where}.email: must be an address or a list of 1 to {MAX_ADDRESSES}")
            email = []
        for j, address in enumerate(email):
            if not isinstance(address, str) or not _EMAIL.fullmatch(address):
                errors.append(f"{where}.email[{j}]: {quote(address)[:80]} is not an email address")
    after_s = None
    if "after" in d:
        try:
            after_s = parse_duration(d["after"])
        except ValueError as err:
            errors.append(f"{where}.after: {err}")
        if "waiting" not in when:
            errors.append(f"{where}.after: only applies with when: [waiting]")
    elif "waiting" in when:
        errors.append(f"{where}.after: required with waiting (how long a gate waits first)")
    subject = d.get("as")
    if subject is not None and not (isinstance(subject, str) and _SUBJECT.fullmatch(subject)):
        errors.append(f"{where}.as: {quote(subject)[:60]} must be a name ([A-Za-z0-9_.@-]+)")
    if len(errors) > n:
        return None
    return NotifyRule(
        when=tuple(dict.fromkeys(when)),
        webhook=webhook,
        email=tuple(email or ()),
        after_s=after_s,
        subject=subject,
    )
