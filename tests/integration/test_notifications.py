"""Notifications end to end: a real HTTP receiver and a real SMTP server (aiosmtpd) on
loopback, a real conductor delivering the outbox; SIGKILL of the sender between attempts."""

from __future__ import annotations

import email.policy
import json
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from engine_adapter.testing import harness

RECEIVER_ENV = "THREADLINE_TEST_RECEIVER"


class Receiver:
    """An HTTP receiver that answers 500 to its first `failures` requests, then 200."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.requests: list[tuple[dict[str, str], dict[str, Any], int]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status = 500 if len(receiver.requests) < receiver.failures else 200
                receiver.requests.append((dict(self.headers), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def accepted(self) -> list[dict[str, Any]]:
        return [body for _, body, status in self.requests if status == 200]


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.controller = Controller(self, hostname="127.0.0.1", port=harness.free_port())

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 OK"

    @classmethod
    @contextmanager
    def running(cls) -> Iterator[Mailbox]:
        box = cls()
        box.controller.start()
        try:
            yield box
        finally:
            box.controller.stop()


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    with Mailbox.running() as box:
        yield box


def conductor_env(receiver: Receiver, mailbox: Mailbox) -> dict[str, str]:
    return {
        RECEIVER_ENV: receiver.url,
        "THREADLINE_NOTIFY_ALLOW": "127.0.0.1",  # the test's receiver is on loopback
        "THREADLINE_SMTP_HOST": "127.0.0.1",
        "THREADLINE_SMTP_PORT": str(mailbox.controller.port),
        "THREADLINE_PUBLIC_URL": "http://links.example",
    }


NOTIFIED = f"""
slug: notified
steps:
  - id: ship
    human_gate: "Ship 1.2?"
  - id: after
    run_command: echo shipped
notify:
  - when: [gate, failed]
    webhook: env:{RECEIVER_ENV}
  - when: [gate]
    to: [alice]                  # her links, on the channel she registered
  - when: [waiting]
    after: 2s
    email: [ops@example.com]
"""


def test_a_gate_is_announced_by_webhook_and_email_and_decided_by_its_link(
    db_url, conn, apply, procs, mailbox
):
    receiver = Receiver()
    added = harness.run_cli(db_url, "user", "add", "alice", "--email", "alice@example.com")
    assert added.returncode == 0, added.stderr
    apply(NOTIFIED)
    procs.start("conductor", env=conductor_env(receiver, mailbox))
    procs.start("bots")
    run_id = json.loads(harness.run_cli(db_url, "spawn", "notified", "--json").stdout)["run_id"]
    harness.wait_for(
        lambda: len(receiver.accepted()) == 1 and len(mailbox.messages) >= 2,
        timeout=30,
        what="the gate's webhook and both emails",
    )
    slack = receiver.accepted()[0]
    assert "Ship 1.2?" in slack["text"] and slack["threadline"]["run_id"] == run_id
    # The recipe's webhook is told, with no buttons: no one's links go where a recipe points.
    assert len(slack["blocks"]) == 1 and slack["threadline"]["links"] == {}
    headers = receiver.requests[0][0]
    assert headers["Idempotency-Key"].startswith("threadline-notification-")
    by_to = {m["To"]: m for m in mailbox.messages}
    assert set(by_to) == {"alice@example.com", "ops@example.com"}  # the gate; then it waited
    assert "Still waiting for a decision" in by_to["ops@example.com"].get_content()
    assert "/resume/" not in by_to["ops@example.com"].get_content()
    assert len(mailbox.messages) == 2  # the waiting rule spoke once, however often it swept
    # Alice's link decides as alice.
    token = re.search(r"/resume/(tl_rt_[\w-]+)", by_to["alice@example.com"].get_content())[1]
    done = harness.run_cli(
        db_url, "resume", stdin=json.dumps({"run_id": run_id, "resume_token": token})
    )
    assert done.returncode == 0, done.stdout
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    decision = next(e for e in view["thread"] if e["kind"] == "decision")
    assert decision["author"] == "alice"
    notes = [e["text"] for e in view["thread"] if e["text"].startswith("Notified")]
    assert sorted(notes) == [
        "Notified alice at alice@example.com (a gate opened).",
        "Notified ops@example.com (a gate is waiting).",
        f"Notified webhook env:{RECEIVER_ENV} (a gate opened).",  # the name, never the URL
    ]
    assert "links.example" not in json.dumps(view["thread"])  # no link in the thread


def test_the_outbox_survives_a_killed_sender_and_a_failing_receiver(
    db_url, conn, apply, procs, mailbox
):
    receiver = Receiver(failures=2)
    apply(NOTIFIED.replace('human_gate: "Ship 1.2?"', "run_command: exit 3"))
    env = conductor_env(receiver, mailbox)
    conductor = procs.start("conductor", env=env)
    procs.start("bots")
    run_id = json.loads(harness.run_cli(db_url, "spawn", "notified", "--json").stdout)["run_id"]
    harness.wait_for(lambda: len(receiver.requests) >= 1, timeout=30, what="the first attempt")
    conductor.send_signal(signal.SIGKILL)
    conductor.wait()
    procs.start("conductor", env=env)
    harness.wait_for(lambda: receiver.accepted(), timeout=60, what="the delivery")

    def outbox_row() -> dict[str, Any]:
        return conn.execute(
            "select event, status, attempts, last_error from threadline.notifications"
            " where run_id = %s",
            (run_id,),
        ).fetchone()

    # The receiver answers before the sender marks the row: wait for the mark.
    row = harness.wait_for(
        lambda: (r := outbox_row())["status"] != "pending" and r, what="the row marked"
    )
    assert row["event"] == "failed" and row["status"] == "sent" and row["attempts"] == 3
    assert [status for _, _, status in receiver.requests] == [500, 500, 200]
    keys = {headers["Idempotency-Key"] for headers, _, _ in receiver.requests}
    assert len(keys) == 1  # one notification, the same id on every attempt
    assert "step ship failed" in receiver.accepted()[0]["text"]
    assert mailbox.messages == []  # no gate: the email rules had nothing to say
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=10)
    assert f"Notified webhook env:{RECEIVER_ENV} (the run failed)." in [
        e["text"] for e in view["thread"]
    ]


def test_notify_rules_are_checked_when_applied(apply):
    from engine_adapter.recipes.recipes import RecipeError

    with pytest.raises(RecipeError) as info:
        apply("""
slug: bad-notify
steps: [{id: s, run_command: "true"}]
notify:
  - when: [gate, later]
    webhook: env:SLACK_URL
  - when: [waiting]
    email: not-an-address
""")
    assert info.value.errors == [
        'notify[0].when: ["gate", "later"] must be a list of gate, failed, waiting',
        'notify[0].webhook: "env:SLACK_URL" must be an http(s) URL or env:THREADLINE_NAME (a '
        "variable of the conductor's that no step ever receives)",
        'notify[1].email[0]: "not-an-address" is not an email address',
        "notify[1].after: required with waiting (how long a gate waits first)",
    ]
