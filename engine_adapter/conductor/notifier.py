"""The notifier: delivers the notification outbox (notifications.py) from a thread of the
conductor, on a connection of its own.

Each due row is leased, sent and then marked sent, with a note in the run's thread; a failed
delivery is retried with backoff (and jitter) up to MAX_ATTEMPTS, then given up, saying so in the
thread. A notifier killed between sending and marking sends the row again when its lease ends:
delivery is at least once, and every copy carries the same id (the webhook's Idempotency-Key,
the email's Message-ID) so a receiver can tell. A gate's notification to an account carries
resume links that decide as that account, minted as it is sent (only their hashes are kept),
and only when its target is still a channel the account registered; any other carries none.

Every target is checked again here, as it is sent (notify_spec.py): an email target must be one
plain address, and a webhook's host is resolved and every address it resolves to must be public
(or in THREADLINE_NOTIFY_ALLOW); the request then goes to the address that was checked, follows
no redirect and uses no proxy. A refused target is given up at once, saying why in the thread.

The run's own words (a gate's question, from its recipe and payload) never sit where Threadline's
links do: the links come first, on lines of their own, and the run's text follows a separator
with every line quoted, so no payload can write a line that reads "Approve: <its own URL>".
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import os
import random
import smtplib
import socket
import ssl
import threading
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlsplit

import psycopg

from engine_adapter.access import accounts
from engine_adapter.model.domain import RetryPolicy
from engine_adapter.model.vocab import NotifyEvent
from engine_adapter.recipes.notify_spec import (
    Allowlist,
    address_kind,
    email_problem,
    refusal,
    webhook_problem,
)
from engine_adapter.runs import notifications, resume_tokens, thread_entries
from engine_adapter.store import db

log = logging.getLogger("threadline.notifier")

POLL_S = 0.5
WAITING_SWEEP_S = 5.0
MAX_ATTEMPTS = 8
RETRY = RetryPolicy(backoff_s=1.0, max_backoff_s=300.0)  # 2 s, 4 s, ... up to 5 min
SEND_TIMEOUT_S = 10.0
# A sender killed mid-send leaves its row leased this long: a send's timeout with room to spare,
# no longer, so the notification goes out again soon after the crash.
LEASE_S = 3 * SEND_TIMEOUT_S
PUBLIC_URL_ENV = "THREADLINE_PUBLIC_URL"  # where resume links point: the webhook ingress
DEFAULT_PUBLIC_URL = "http://127.0.0.1:5007"
SMTP_ENV = "THREADLINE_SMTP_"  # HOST, PORT, FROM, USER, PASSWORD, STARTTLS


class DeliveryError(Exception):
    """A delivery that did not go through; the message says why."""


class Refused(DeliveryError):
    """A target Threadline will not send to: trying again would not change that."""


@dataclass(frozen=True)
class Due:
    id: int
    run_id: str
    event: str
    event_key: str
    channel: str
    target: str
    subject: str | None  # the account its links decide as; None: a notice without links
    text: str
    attempts: int


def backoff_s(attempts: int) -> float:
    """Exponential, capped, with jitter so many failed receivers do not retry in step."""
    return RETRY.wait_s(attempts, random.uniform(0.8, 1.2))


class Notifier:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="notifier", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def loop(self) -> None:
        since_sweep = WAITING_SWEEP_S
        while not self.stop.wait(POLL_S):
            try:
                since_sweep += POLL_S
                if since_sweep >= WAITING_SWEEP_S:
                    since_sweep = 0.0
                    notifications.sweep_waiting(self.conn)
                while self.deliver_due():
                    pass
            except psycopg.OperationalError:
                log.exception("notifier: the database is unavailable; retrying")
                self.stop.wait(5)
            except Exception:  # nothing may stop the notifier for good
                log.exception("notifier: a round failed; retrying")

    def deliver_due(self, limit: int = 10) -> int:
        with self.conn.transaction():
            rows = db.fetch_all(
                self.conn, "claim_notifications", dict(lease_s=LEASE_S, limit=limit)
            )
        for row in rows:
            self.deliver(Due(**{**row, "run_id": str(row["run_id"])}))
        return len(rows)

    def deliver(self, due: Due) -> None:
        try:
            links = self.links(due)
            if due.channel == "webhook":
                post_webhook(due, links)
            else:
                send_email(due, links)
        except Refused as err:
            return self.failed(due, f"refused: {err}", refused=True)
        except DeliveryError as err:
            return self.failed(due, str(err))
        with self.conn.transaction():
            if db.fetch_one(self.conn, "notification_sent", dict(id=due.id)):
                thread_entries.system_note(
                    self.conn,
                    due.run_id,
                    f"Notified {_shown(due)} ({_EVENTS[due.event]}).",
                    dedupe_key=f"notified:{due.id}",
                    data={"notification": due.id, "channel": due.channel},
                )
                db.notify(self.conn, due.run_id, "thread")

    def failed(self, due: Due, error: str, refused: bool = False) -> None:
        give_up = refused or due.attempts >= MAX_ATTEMPTS
        log.warning("notification %s to %s failed: %s", due.id, _shown(due), error)
        with self.conn.transaction():
            db.fetch_one(
                self.conn,
                "notification_failed",
                dict(id=due.id, give_up=give_up, backoff_s=backoff_s(due.attempts), error=error),
            )
            if give_up:
                thread_entries.system_note(
                    self.conn,
                    due.run_id,
                    f"Could not notify {_shown(due)} ({_EVENTS[due.event]}) after {due.attempts} "
                    f"attempt{'s' if due.attempts != 1 else ''}: {error}",
                    dedupe_key=f"notify-failed:{due.id}",
                    data={"notification": due.id, "channel": due.channel},
                )
                db.notify(self.conn, due.run_id, "thread")

    def links(self, due: Due) -> dict[str, str]:
        """Resume links for a gate still open: decide it as the notification's subject, an
        account, sent only to a channel it registered (never where a recipe pointed)."""
        if due.event == NotifyEvent.FAILED or due.subject is None:
            return {}
        if not accounts.registered(self.conn, due.subject, due.channel, due.target):
            return {}
        where = dict(run_id=due.run_id, gate_key=due.event_key)
        if not db.fetch_row(self.conn, "gate_still_open", where)["open"]:
            return {}
        issued = resume_tokens.issue(self.conn, due.run_id, due.event_key, due.subject, "link")
        base = os.environ.get(PUBLIC_URL_ENV, DEFAULT_PUBLIC_URL).rstrip("/")
        url = f"{base}/resume/{issued.token}"
        return {"approve": f"{url}?decision=approve", "deny": f"{url}?decision=deny"}


_EVENTS: dict[str, str] = {  # a notification event, as its row holds it
    NotifyEvent.GATE: "a gate opened",
    NotifyEvent.FAILED: "the run failed",
    NotifyEvent.WAITING: "a gate is waiting",
}


def _shown(due: Due) -> str:
    """A target as the thread shows it (an account's: whose): never a secret URL."""
    if due.channel == "email":
        where = due.target
    else:
        where = f"webhook {due.target}" if due.target.startswith("env:") else "a webhook"
    return f"{due.subject} at {where}" if due.subject else where


def webhook_url(target: str) -> str:
    if target.startswith("env:"):
        name = target.removeprefix("env:")
        url = os.environ.get(name)
        if not url:
            raise DeliveryError(f"{name} is not set in the conductor's environment")
        return url
    return target


def _quoted(text: str, marker: str) -> list[str]:
    """The run's text, every line behind marker: it can never start a line of its own."""
    return [marker + line for line in (text.splitlines() or [""])]


def _slack_escaped(text: str) -> str:
    """Slack's mrkdwn reads <...> as links and mentions: the run's text makes neither."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(due: Due, links: dict[str, str]) -> dict[str, Any]:
    """Slack-compatible JSON (text, and blocks with the resume links as buttons), plus the same
    facts for any other receiver under `threadline`. The run's text is escaped and quoted: it
    cannot make a link, a mention or a button."""
    said = "\n".join(_quoted(_slack_escaped(due.text), ">"))
    text = f"Threadline: {_EVENTS[due.event]} (run {due.run_id})\n{said}"
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    if links:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": label},
                        "style": style,
                        "url": links[decision],
                    }
                    for decision, label, style in (
                        ("approve", "Approve", "primary"),
                        ("deny", "Deny", "danger"),
                    )
                ],
            }
        )
    return {
        "text": text,
        "blocks": blocks,
        "threadline": {
            "notification": due.id,
            "run_id": due.run_id,
            "event": due.event,
            "text": due.text,
            "links": links,
        },
    }


def email_body(due: Due, links: dict[str, str]) -> str:
    """Threadline's lines (what happened, the links) first; then the run's text, quoted."""
    lines = [f"Threadline: {_EVENTS[due.event]} in run {due.run_id}."]
    lines += [f"{decision.title()}: {url}" for decision, url in links.items()]
    lines += [
        "",
        "-- The run says (its recipe's and payload's words; any link below is not Threadline's):",
        *_quoted(due.text, "> "),
    ]
    return "\n".join(lines) + "\n"


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the address that was checked, not to what the name resolves to next."""

    def __init__(self, host: str, port: int | None, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int | None, address: str, timeout: float) -> None:
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.address = address

    def connect(self) -> None:
        raw = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self.tls.wrap_socket(raw, server_hostname=self.host)  # the name's certificate


def checked_address(url: str, allow: Allowlist) -> str:
    """The address to send url's request to, after checking the URL and every address its host
    resolves to; Refused saying why not."""
    if problem := webhook_problem(url, allow):
        raise Refused(problem)
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise DeliveryError(f"the webhook's host {host} could not be resolved: {err}") from None
    addresses = [str(info[4][0]) for info in infos]
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])  # without an IPv6 zone
        if (kind := address_kind(ip)) and not allow.permits(host, ip):
            raise Refused(refusal(host, f"{host} resolves to {ip}, {kind}"))
    return addresses[0]


def post_webhook(due: Due, links: dict[str, str]) -> None:
    url = webhook_url(due.target)
    address = checked_address(url, Allowlist.from_env())
    parts = urlsplit(url)
    kind = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
    connection = kind(parts.hostname or "", parts.port, address, SEND_TIMEOUT_S)
    body = json.dumps(slack_message(due, links), ensure_ascii=False).encode()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(
            "POST",
            path,
            body=body,
            headers={
                "Content-Type": "application/json",
                "Idempotency-Key": f"threadline-notification-{due.id}",
                "User-Agent": "threadline-notifier",
            },
        )
        response = connection.getresponse()
        response.read(1024)
    except (OSError, http.client.HTTPException) as err:
        raise DeliveryError(f"the webhook could not be reached: {err}") from None
    finally:
        connection.close()
    if not 200 <= response.status < 300:
        moved = " (redirects are not followed)" if 300 <= response.status < 400 else ""
        raise DeliveryError(f"the webhook answered {response.status}{moved}")


def send_email(due: Due, links: dict[str, str]) -> None:
    if problem := email_problem(due.target):
        raise Refused(problem)
    host = os.environ.get(SMTP_ENV + "HOST")
    if not host:
        raise DeliveryError(f"{SMTP_ENV}HOST is not set in the conductor's environment")
    message = EmailMessage()
    message["From"] = os.environ.get(SMTP_ENV + "FROM", "threadline@localhost")
    message["To"] = due.target
    first = (due.text.splitlines() or [""])[0][:120]
    message["Subject"] = f"[threadline] {_EVENTS[due.event]}: {first}"
    message["Message-ID"] = f"<threadline-notification-{due.id}@threadline>"
    message.set_content(email_body(due, links))
    try:
        port = int(os.environ.get(SMTP_ENV + "PORT", "25"))
        with smtplib.SMTP(host, port, timeout=SEND_TIMEOUT_S) as smtp:
            if os.environ.get(SMTP_ENV + "STARTTLS") == "1":
                smtp.starttls()
            user = os.environ.get(SMTP_ENV + "USER")
            if user:
                smtp.login(user, os.environ.get(SMTP_ENV + "PASSWORD", ""))
            smtp.send_message(message, to_addrs=[due.target])  # one recipient, whatever To says
    except (smtplib.SMTPException, OSError, ValueError) as err:
        raise DeliveryError(f"the mail server refused or could not be reached: {err}") from None
