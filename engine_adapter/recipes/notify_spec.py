"""A recipe's `notify:` rules: who hears of a gate opening, a run failing, or a gate waiting too
long, and how (an outgoing webhook with Slack-compatible JSON, or email). Pure Python, no
database; notifications.py writes the outbox, notifier.py delivers it.

A rule's `to:` names accounts (accounts.py): each hears on the channels it registered, and only
there do its resume links go. A recipe never chooses whose links go where: a webhook or email
target gets the notice without links (the old `as:` is refused, saying so).

A webhook URL is written literally or named as `env:THREADLINE_<NAME>` (read by the conductor):
Threadline's own variables never reach a step, so a secret URL stays out of every command.

Targets are checked twice: when a recipe is validated (what the text shows) and again by the
sender (what the name resolves to, notifier.py). A webhook goes only to http(s) on a public
address: loopback, link-local, private and other non-global addresses are refused unless the
admin lists them in THREADLINE_NOTIFY_ALLOW. An email target is one plain address.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from engine_adapter.model.identity import ACCOUNT_NAME
from engine_adapter.model.recipe_values import format_duration, parse_duration, quote
from engine_adapter.model.vocab import NotifyEvent

EVENTS = tuple(NotifyEvent)
KEYS = ("when", "webhook", "email", "to", "after")
TARGETS = ("webhook", "email", "to")
MAX_RULES = 20
MAX_ADDRESSES = 50
_URL = re.compile(r"https?://[^\s]{1,2000}")
_ENV_URL = re.compile(r"env:(THREADLINE_[A-Z0-9_]{1,100})")
# One address, no display name, no quoting: a comma, semicolon or newline cannot make two.
_EMAIL = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}"
)
_EMAIL_SEPARATORS = re.compile(r"[,;\s<>\"]")
ALLOW_ENV = "THREADLINE_NOTIFY_ALLOW"  # hosts, addresses, networks a webhook may reach anyway
_NUMERIC_HOST = re.compile(r"[0-9a-fA-FxX.]+")  # 127.1, 2130706433, 0x7f.1: IPv4 to a resolver


@dataclass(frozen=True)
class NotifyRule:
    when: tuple[str, ...]
    webhook: str | None = None  # a URL, or env:THREADLINE_NAME
    email: tuple[str, ...] = ()
    after_s: float | None = None  # `waiting`: how long a gate waits before this rule speaks
    to: tuple[str, ...] = ()  # accounts: each hears (with its links) on its own channels

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"when": list(self.when)}
        if self.webhook is not None:
            d["webhook"] = self.webhook
        if self.email:
            d["email"] = list(self.email)
        if self.after_s is not None:
            d["after"] = format_duration(self.after_s)
        if self.to:
            d["to"] = list(self.to)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NotifyRule:
        """A stored rule (validated when its recipe was applied). Its targets are taken as they
        are: the sender checks them again before sending, under today's allowlist."""
        errors: list[str] = []
        rule = _parse_rule(d, "notify[]", errors, check_targets=False)
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


def _parse_rule(
    d: Any, where: str, errors: list[str], check_targets: bool = True
) -> NotifyRule | None:
    if not isinstance(d, dict):
        errors.append(f"{where}: must be a mapping with when and webhook, email or to")
        return None
    n = len(errors)
    if "as" in d and check_targets:  # a stored rule's old `as` is ignored: its links go nowhere
        name = d["as"] if isinstance(d["as"], str) and ACCOUNT_NAME.fullmatch(d["as"]) else "NAME"
        errors.append(_AS_REFUSED.format(where=where, name=name))
    errors += [
        f"{where}.{k}: unknown field (allowed: {', '.join(KEYS)})"
        for k in d
        if k not in KEYS and k != "as"
    ]
    when = d.get("when")
    if not isinstance(when, list) or not when or any(w not in EVENTS for w in when):
        errors.append(f"{where}.when: {quote(when)} must be a list of {', '.join(EVENTS)}")
        when = []
    webhook, email, to = d.get("webhook"), d.get("email"), d.get("to")
    if sum(d.get(k) is not None for k in TARGETS) != 1:
        errors.append(f"{where}: give exactly one of webhook, email and to")
    if webhook is not None and not (
        isinstance(webhook, str) and (_URL.fullmatch(webhook) or _ENV_URL.fullmatch(webhook))
    ):
        errors.append(
            f"{where}.webhook: {quote(webhook)[:80]} must be an http(s) URL or "
            "env:THREADLINE_NAME (a variable of the conductor's that no step ever receives)"
        )
    elif check_targets and webhook is not None and not webhook.startswith("env:"):
        if problem := webhook_problem(webhook, Allowlist.from_env()):
            errors.append(f"{where}.webhook: {problem}")
    if email is not None:
        if isinstance(email, str):
            email = [email]
        if not isinstance(email, list) or not 1 <= len(email) <= MAX_ADDRESSES:
            errors.append(f"{where}.email: must be an address or a list of 1 to {MAX_ADDRESSES}")
            email = []
        for j, address in enumerate(email):
            if not isinstance(address, str):
                errors.append(f"{where}.email[{j}]: {quote(address)[:80]} is not an email address")
            elif check_targets and (problem := email_problem(address)):
                errors.append(f"{where}.email[{j}]: {problem}")
    after_s = None
    if "after" in d:
        try:
            after_s = parse_duration(d["after"])
        except ValueError as err:
            errors.append(f"{where}.after: {err}")
        if NotifyEvent.WAITING not in when:
            errors.append(f"{where}.after: only applies with when: [waiting]")
    elif NotifyEvent.WAITING in when:
        errors.append(f"{where}.after: required with waiting (how long a gate waits first)")
    if isinstance(to, str):
        to = [to]
    if to is not None and (
        not isinstance(to, list)
        or not 1 <= len(to) <= MAX_ADDRESSES
        or not all(isinstance(a, str) and ACCOUNT_NAME.fullmatch(a) for a in to)
    ):
        errors.append(
            f"{where}.to: {quote(to)[:80]} must be an account's name or a list of 1 to "
            f"{MAX_ADDRESSES} ([A-Za-z0-9_.@-]+)"
        )
    if len(errors) > n:
        return None
    return NotifyRule(
        when=tuple(dict.fromkeys(when)),
        webhook=webhook,
        email=tuple(email or ()),
        after_s=after_s,
        to=tuple(dict.fromkeys(to or ())),
    )


_AS_REFUSED = (
    "{where}.as: a recipe no longer chooses whose resume links go where; name the "
    "accounts to notify instead (to: [{name}]): each hears on the channels it registered "
    "(`threadline user channel add`), and only there do its links go; a webhook or email "
    "target gets the notice without links"
)


def email_problem(address: str) -> str | None:
    """Why address is not one plain email address (None: it is)."""
    if found := _EMAIL_SEPARATORS.search(address):
        return (
            f"{quote(address)[:80]} holds {quote(found.group())}: one address per entry, "
            "without a name or quotes (list several as several entries)"
        )
    local = address.rpartition("@")[0]
    if not _EMAIL.fullmatch(address) or len(local) > 64 or len(address) > 254:
        return f"{quote(address)[:80]} is not an email address"
    return None


# -- where a webhook may go ---------------------------------------------------------------------
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Allowlist:
    """THREADLINE_NOTIFY_ALLOW: comma-separated host names, addresses and networks (CIDR) that a
    webhook may reach although they are not public (an intranet chat server, a test receiver)."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Allowlist:
        raw = (os.environ if env is None else env).get(ALLOW_ENV, "")
        hosts, networks = set(), []
        for entry in (e.strip().lower().rstrip(".") for e in raw.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry)
        return cls(frozenset(hosts), tuple(networks))

    def permits(self, host: str, address: Address | None) -> bool:
        if host.lower().rstrip(".") in self.hosts:
            return True
        return address is not None and any(address in n for n in self.networks)


def literal_address(host: str) -> Address | None:
    """The address a URL's host names without asking DNS (IPv6, dotted IPv4, and the forms a
    resolver reads as IPv4: 127.1, 2130706433, 0x7f.1), else None."""
    try:
        return ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        pass
    if _NUMERIC_HOST.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def address_kind(address: Address) -> str | None:
    """What kind of address a webhook may not go to address is ("a loopback address"); None
    for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for kind, test in (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
    ):
        if test:
            return f"a {kind} address"
    return None if address.is_global else "not a public address"


def refusal(host: str, why: str) -> str:
    return (
        f"{why}: webhooks go only to public addresses, unless {ALLOW_ENV} (an admin's list of "
        f"hosts, addresses and networks, read by the conductor and where recipes are validated) "
        f"names {host}"
    )


def webhook_problem(url: str, allow: Allowlist) -> str | None:
    """Why a webhook URL may not be used, from its text alone (None: it may, as far as the text
    shows; the sender checks what its name resolves to)."""
    try:
        parts = urlsplit(url)
        host, _ = parts.hostname, parts.port  # a bad port raises
    except ValueError as err:
        return f"{quote(url)[:80]} is not a URL: {err}"
    if parts.scheme not in ("http", "https"):
        return f"{quote(url)[:80]}: only http and https are sent to"
    if not host:
        return f"{quote(url)[:80]} names no host"
    address = literal_address(host)
    if address is not None and (kind := address_kind(address)):
        return None if allow.permits(host, address) else refusal(host, f"{address} is {kind}")
    bare = host.rstrip(".")
    if (bare == "localhost" or bare.endswith(".localhost")) and not allow.permits(host, None):
        return refusal(host, f"{host} is this machine")
    return None
