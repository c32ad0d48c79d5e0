"""Identity: decisions are made by an authenticated identity (the CLI's OS account), never by a
typed name; --as is recorded but satisfies no approvers list; the debug emit cannot release a
step or a gate."""

from __future__ import annotations

import pytest

from engine_adapter.model import names
from engine_adapter.model.identity import Actor, os_user
from engine_adapter.runs import commands, gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

GATE = """
slug: gated
steps:
  - id: ask
    human_gate: "Go ahead?"
    {extra}
"""


def waiting_run(conn, apply, procs, extra: str = "") -> str:
    apply(GATE.replace("{extra}", extra))
    procs.start("conductor")
    run_id = spawn(conn, "gated").run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    return run_id


def decisions(conn, run_id: str) -> list[dict]:
    return conn.execute(
        "select decision, actor, via, on_behalf_of from threadline.decisions where run_id = %s",
        (run_id,),
    ).fetchall()


def test_as_name_never_satisfies_approvers(conn, apply, procs):
    run_id = waiting_run(conn, apply, procs, "approvers: [alice]")
    # Neither --as nor a forged $USER makes the caller alice.
    out = harness.run_cli(
        procs.url, "approve", run_id, "--as", "alice", env={"USER": "alice", "LOGNAME": "alice"}
    )
    assert out.returncode == 2
    assert "cannot satisfy gate ask's approvers" in out.stderr
    out = harness.run_cli(procs.url, "reply", run_id, "👍", "--as", "alice")
    assert out.returncode == 0 and "gate" not in out.stdout.split("\n")[0]
    assert decisions(conn, run_id) == []
    assert harness.wait_for_state(procs.url, run_id, "waiting")


def test_the_cli_acts_as_its_os_account(conn, apply, procs):
    me = os_user()
    run_id = waiting_run(conn, apply, procs, f"approvers: [{me}]")
    out = harness.run_cli(
        procs.url, "approve", run_id, "--reason", "checked", env={"USER": "mallory"}
    )
    assert out.returncode == 0, out.stderr
    assert decisions(conn, run_id) == [
        {"decision": "approve", "actor": me, "via": "cli", "on_behalf_of": None}
    ]
    harness.wait_for_state(procs.url, run_id, "completed")


def test_acting_for_someone_is_recorded_as_such(conn, apply, procs):
    run_id = waiting_run(conn, apply, procs)
    out = harness.run_cli(procs.url, "deny", run_id, "--as", "bob", "--reason", "bob said no")
    assert out.returncode == 0, out.stderr
    me = os_user()
    assert decisions(conn, run_id) == [
        {"decision": "deny", "actor": me, "via": "cli", "on_behalf_of": "bob"}
    ]
    view = harness.wait_for_state(procs.url, run_id, "cancelled")
    assert any(e["author"] == f"{me} for bob" and e["kind"] == "decision" for e in view["thread"])


@pytest.mark.parametrize(
    "event",
    ["step.done:{key}", "run.retry:{key}", "run.admit:{run}", " Threadline.step.done:{key}"],
)
def test_debug_emit_cannot_release_a_gate(conn, apply, procs, event):
    run_id = waiting_run(conn, apply, procs, "approvers: [alice]")
    key = names.step_key(run_id, "ask", 1)
    name = event.format(key=key, run=run_id)
    name = name if name.strip().lower().startswith("threadline.") else f"threadline.{name}"
    before = conn.execute(
        "select count(*) as n from threadline.thread_entries where run_id = %s", (run_id,)
    ).fetchone()["n"]
    with pytest.raises(commands.CommandRefused, match="Threadline's own"):
        commands.emit_debug_event(
            conn,
            run_id,
            name,
            {"decision": "approve", "actor": "alice"},
            Actor("mallory", "console"),
        )
    after = conn.execute(
        "select count(*) as n from threadline.thread_entries where run_id = %s", (run_id,)
    ).fetchone()["n"]
    assert after == before
    # Absurd keeps a placeholder row (emitted at the epoch) for an event that is only awaited.
    emitted = conn.execute(
        "select count(*) as n from absurd.e_threadline where event_name like %s "
        "and emitted_at > 'epoch'::timestamptz + interval '1 day'",
        (f"%{key}%",),
    ).fetchone()["n"]
    assert emitted == 0
    assert decisions(conn, run_id) == []


def test_a_gate_refuses_the_runs_initiator_unless_it_allows_self_approval(conn, apply, procs):
    apply(GATE.replace("{extra}", ""))
    procs.start("conductor")
    out = harness.run_cli(procs.url, "spawn", "gated")
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.strip()
    harness.wait_for_state(procs.url, run_id, "waiting")
    refused = harness.run_cli(procs.url, "approve", run_id)
    assert refused.returncode == 2 and "started this run" in refused.stderr
    assert "self_approval: true" in refused.stderr  # the way out, named
    assert (
        harness.run_cli(procs.url, "reply", run_id, "👍").returncode == 0
    )  # kept, decides nothing
    assert decisions(conn, run_id) == []
    gates.decide(conn, run_id, "approve", Actor("alice", "console"))
    harness.wait_for_state(procs.url, run_id, "completed")

    apply(GATE.replace("{extra}", "self_approval: true"))
    run_id = harness.run_cli(procs.url, "spawn", "gated").stdout.strip()
    harness.wait_for_state(procs.url, run_id, "waiting")
    allowed = harness.run_cli(procs.url, "approve", run_id)
    assert allowed.returncode == 0, allowed.stderr
    assert decisions(conn, run_id) == [
        {"decision": "approve", "actor": os_user(), "via": "cli", "on_behalf_of": None}
    ]
