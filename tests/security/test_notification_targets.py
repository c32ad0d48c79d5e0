"""Notifications attacked through a recipe and a payload, with a real conductor, a real HTTP
receiver and a real SMTP server on loopback: a webhook aimed at this machine, an address list
smuggled into one address, and a payload that writes its own "Approve:" line."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from engine_adapter.recipes.notify_spec import ALLOW_ENV
from engine_adapter.recipes.recipes import RecipeError
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.integration.test_notifications import RECEIVER_ENV, Mailbox, Receiver


@pytest.fixture
def smtp() -> Iterator[Mailbox]:
    with Mailbox.running() as box:
        yield box


def smtp_env(box) -> dict[str, str]:
    return {
        "THREADLINE_SMTP_HOST": "127.0.0.1",
        "THREADLINE_SMTP_PORT": str(box.controller.port),
        "THREADLINE_PUBLIC_URL": "http://links.example",
    }


def workflows(conn) -> int:
    return conn.execute("select count(*) as n from threadline.workflows").fetchone()["n"]


def test_recipes_naming_this_machine_or_glued_addresses_are_refused(conn, apply, monkeypatch):
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    before = workflows(conn)
    for target, says in [
        ("webhook: http://127.0.0.1:5007/hooks/x", "127.0.0.1 is a loopback address"),
        ("webhook: http://[::1]:5432/", "::1 is a loopback address"),
        ("webhook: http://169.254.169.254/latest", "a link-local address"),
        ("webhook: http://localhost:5006/api/v1/runs", "localhost is this machine"),
        ("webhook: file:///etc/passwd", "must be an http(s) URL"),
        ('email: "x,evil@evil.example"', 'holds ","'),
        ('email: ["ops@example.com;evil@evil.example"]', 'holds ";"'),
    ]:
        with pytest.raises(RecipeError) as info:
            apply(f"slug: bad\nsteps: [{{id: s, human_gate: go}}]\nnotify:\n"
                  f"  - when: [gate]\n    {target}\n")  # fmt: skip
        assert any(says in e for e in info.value.errors), (target, info.value.errors)
        if "webhook: http" in target:
            assert any(ALLOW_ENV in e for e in info.value.errors)  # says how to allow it
    assert workflows(conn) == before
    monkeypatch.setenv(ALLOW_ENV, "127.0.0.1")  # an admin allows a receiver on this machine
    apply("slug: ok\nsteps: [{id: s, human_gate: go}]\nnotify:\n"
          "  - when: [gate]\n    webhook: http://127.0.0.1:5007/hooks/x\n")  # fmt: skip
    assert workflows(conn) == before + 1


def loopback_name() -> str:
    """A name of this machine that does not say so ("vm", "runsc"...), else localhost."""
    name = socket.gethostname()
    try:
        if all(info[4][0].startswith("127.") for info in socket.getaddrinfo(name, 80)):
            return name
    except OSError:
        pass
    return "localhost"


def test_the_sender_refuses_what_a_recipe_could_not_show(db_url, conn, apply, procs, smtp):
    receiver = Receiver()
    port = receiver.url.rsplit(":", 1)[1]
    apply(f"""
slug: sneaky
steps: [{{id: s, human_gate: "go?"}}]
notify:
  - when: [gate]
    webhook: env:{RECEIVER_ENV}
  - when: [gate]
    email: ops@example.com
""")
    # A rule stored before the address checks (or written past them): two recipients in one.
    conn.execute(
        "update threadline.workflows set recipe = jsonb_set(recipe, '{notify,1,email}',"
        " '[\"x,evil@evil.example\"]') where slug = 'sneaky'"
    )
    env = {**smtp_env(smtp), RECEIVER_ENV: f"http://{loopback_name()}:{port}"}
    procs.start("conductor", env=env)
    run_id = spawn(conn, "sneaky", {}).run_id
    harness.wait_for(
        lambda: len(refusals(conn, run_id)) == 2, timeout=30, what="both targets refused"
    )
    notes = refusals(conn, run_id)
    assert any("resolves to 127." in n and ALLOW_ENV in n for n in notes), notes
    assert any('holds ","' in n for n in notes), notes
    assert all("after 1 attempt:" in n for n in notes), notes  # refused, not retried
    time.sleep(1)
    assert receiver.requests == [] and smtp.messages == []  # nothing went out


def refusals(conn, run_id: str) -> list[str]:
    rows = conn.execute(
        "select text from threadline.thread_entries where run_id = %s and text like %s",
        (run_id, "Could not notify%refused:%"),
    ).fetchall()
    return [r["text"] for r in rows]


FORGED = "v2?\nApprove: http://evil.example/steal\n<http://evil.example/steal|Approve>"


def test_payload_text_cannot_forge_an_approve_link(db_url, conn, apply, procs, smtp):
    receiver = Receiver()
    channels = ["--email", "ops@example.com", "--webhook", f"env:{RECEIVER_ENV}"]
    added = harness.run_cli(db_url, "user", "add", "ops", *channels)
    assert added.returncode == 0, added.stderr
    apply("""
slug: forged
steps:
  - id: ship
    human_gate: "Deploy {{payload.version}}"
notify:
  - when: [gate]
    to: [ops]                 # ops's links, on both channels ops registered
""")
    env = {**smtp_env(smtp), RECEIVER_ENV: receiver.url, ALLOW_ENV: "127.0.0.1"}
    procs.start("conductor", env=env)
    spawn(conn, "forged", {"version": FORGED})
    harness.wait_for(
        lambda: receiver.accepted() and smtp.messages, timeout=30, what="both notifications"
    )
    body = smtp.messages[0].get_content()
    approve = [line for line in body.splitlines() if line.startswith("Approve:")]
    assert len(approve) == 1 and approve[0].startswith("Approve: http://links.example/resume/")
    assert body.index(approve[0]) < body.index("evil.example")  # Threadline's lines come first
    said = [line for line in body.splitlines() if "evil.example" in line]
    assert said and all(line.startswith("> ") for line in said), body
    slack = receiver.accepted()[0]
    shown = json.dumps([slack["text"], slack["blocks"][0]])
    assert "<http://evil" not in shown and "&lt;http://evil.example/steal|Approve&gt;" in shown
    buttons = [e["url"] for b in slack["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert len(buttons) == 2 and all(u.startswith("http://links.example/") for u in buttons)
