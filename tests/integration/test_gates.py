"""Human gates: released by reply, approve, denied, timed out, a late approval racing a timeout,
stale decisions refused, and the latency of a release measured from the reply's commit."""

from __future__ import annotations

import statistics
import time

import pytest

from engine_adapter.model.identity import Actor
from engine_adapter.runs import gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

GATE = """
slug: gated
steps:
  - id: ask
    human_gate: "Go ahead with {{payload.what}}?"
    {extra}
  - id: after
    run_command: echo after {{steps.ask.output}}
"""


def gated(apply, extra: str = "") -> str:
    return apply(GATE.replace("{extra}", extra))


def start(procs) -> None:
    procs.start("conductor")
    procs.start("bots")


def decisions(conn, run_id: str) -> list[dict]:
    return conn.execute(
        "select decision, actor, reason from threadline.decisions where run_id = %s", (run_id,)
    ).fetchall()


def test_reply_with_thumbs_up_releases_the_gate(conn, apply, procs):
    gated(apply)
    start(procs)
    run_id = spawn(conn, "gated", {"what": "deploy"}).run_id
    view = harness.wait_for_state(procs.url, run_id, "waiting")
    assert view["steps"][0]["status"] == "gate"
    questions = [e["text"] for e in view["thread"] if e["kind"] == "question"]
    assert questions == ["Go ahead with deploy?"], view["thread"]
    hint = gates.reply(conn, run_id, "what does it change?", Actor("bob", "console"))
    assert hint.decision is None and "👍" in hint.hint
    assert harness.wait_for_state(procs.url, run_id, "waiting")["state"] == "waiting"
    outcome = gates.reply(conn, run_id, "approve, ship it", Actor("bob", "console"))
    assert outcome.decision == "approve"
    view = harness.wait_for_state(procs.url, run_id, "completed")
    assert view["steps"][1]["output"].strip() == "after approve, ship it"
    assert decisions(conn, run_id) == [
        {"decision": "approve", "actor": "bob", "reason": "approve, ship it"}
    ]


def test_approve_command_and_stale_decision_refused(conn, apply, procs):
    gated(apply)
    start(procs)
    run_id = spawn(conn, "gated", {"what": "x"}).run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    with pytest.raises(gates.GateClosed):
        gates.decide(
            conn, run_id, "approve", Actor("alice", "console"), gate_key=f"{run_id}:other:1"
        )
    key = gates.decide(conn, run_id, "approve", Actor("alice", "console"), "lgtm")
    assert key == f"{run_id}:ask:1"
    harness.wait_for_state(procs.url, run_id, "completed")
    entries_before = conn.execute(
        "select count(*) as n from threadline.thread_entries where run_id = %s", (run_id,)
    ).fetchone()["n"]
    with pytest.raises(gates.GateClosed, match="not waiting at a gate"):
        gates.decide(conn, run_id, "deny", Actor("alice", "console"), gate_key=key)
    entries_after = conn.execute(
        "select count(*) as n from threadline.thread_entries where run_id = %s", (run_id,)
    ).fetchone()["n"]
    assert entries_after == entries_before  # a refused decision writes nothing


def test_deny_ends_the_run_cancelled_with_the_reason(conn, apply, procs):
    gated(apply)
    start(procs)
    run_id = spawn(conn, "gated", {"what": "x"}).run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    gates.reply(conn, run_id, "👎 not today", Actor("carol", "console"))
    view = harness.wait_for_state(procs.url, run_id, "cancelled")
    assert [s["status"] for s in view["steps"]] == ["failed", "skipped"]
    assert "denied by carol: 👎 not today" in view["thread"][-1]["text"]
    assert db.fetch_one(conn, "engine_task", dict(run_id=run_id))["state"] == "cancelled"


def test_approvers_narrow_who_decides(conn, apply, procs):
    gated(apply, "approvers: [alice]")
    start(procs)
    run_id = spawn(conn, "gated", {"what": "x"}).run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    with pytest.raises(gates.DecisionRefused, match="not an approver"):
        gates.decide(conn, run_id, "approve", Actor("mallory", "console"))
    assert gates.reply(conn, run_id, "👍", Actor("mallory", "console")).decision is None
    assert gates.reply(conn, run_id, "👍", Actor("alice", "console")).decision == "approve"
    harness.wait_for_state(procs.url, run_id, "completed")


def test_any_reply_gate_from_one_person(conn, apply, procs):
    gated(apply, "accept: any_reply\n    from: dana")
    start(procs)
    run_id = spawn(conn, "gated", {"what": "x"}).run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    assert gates.reply(conn, run_id, "me first", Actor("eve", "console")).decision is None
    assert (
        gates.reply(conn, run_id, "here are the numbers", Actor("dana", "console")).decision
        == "reply"
    )
    view = harness.wait_for_state(procs.url, run_id, "completed")
    assert "here are the numbers" in view["steps"][1]["output"]


@pytest.mark.parametrize("on_timeout, final", [("deny", "cancelled"), ("approve", "completed")])
def test_gate_timeout_takes_its_on_timeout_path(conn, apply, procs, on_timeout, final):
    gated(apply, f"timeout: 1s\n    on_timeout: {on_timeout}")
    start(procs)
    run_id = spawn(conn, "gated", {"what": "x"}).run_id
    view = harness.wait_for_state(procs.url, run_id, final, timeout=30)
    assert [d["decision"] for d in decisions(conn, run_id)] == ["timeout"]
    expected = "Run cancelled: gate ask timed out." if final == "cancelled" else "Run completed."
    assert view["thread"][-1]["text"] == expected


def test_late_approval_racing_a_timeout_has_one_winner(conn, apply, procs):
    gated(apply, "timeout: 2s")
    start(procs)
    outcomes = []
    for offset in (1.9, 2.0, 2.1, 2.3):
        run_id = spawn(conn, "gated", {"what": "race"}).run_id
        view = harness.wait_for_state(procs.url, run_id, "waiting")
        opened = conn.execute(
            "select created_at from threadline.thread_entries where run_id = %s "
            "and kind = 'question'",
            (run_id,),
        ).fetchone()["created_at"]
        now = conn.execute("select now() as n").fetchone()["n"]
        time.sleep(max(0.0, offset - (now - opened).total_seconds()))
        try:
            gates.decide(conn, run_id, "approve", Actor("late", "console"))
            approved = True
        except gates.GateClosed:
            approved = False
        view = harness.wait_for_state(procs.url, run_id, ("completed", "cancelled"), timeout=30)
        taken = decisions(conn, run_id)
        assert len(taken) == 1
        assert (taken[0]["decision"] == "approve") == approved
        assert view["state"] == ("completed" if approved else "cancelled")
        outcomes.append(taken[0]["decision"])
    assert set(outcomes) <= {"approve", "timeout"}


def test_gate_release_latency_from_the_reply_commit(conn, apply, procs):
    gated(apply)
    start(procs)
    samples = []
    for _ in range(5):
        run_id = spawn(conn, "gated", {"what": "x"}).run_id
        harness.wait_for_state(procs.url, run_id, "waiting")
        gates.reply(conn, run_id, "👍", Actor("alice", "console"))
        reply_at = conn.execute(
            "select max(created_at) as t from threadline.thread_entries where run_id = %s "
            "and author_kind = 'human'",
            (run_id,),
        ).fetchone()["t"]
        harness.wait_for_state(procs.url, run_id, "completed")
        next_at = conn.execute(
            "select created_at from threadline.thread_entries where run_id = %s "
            "and kind = 'instruction'",
            (run_id,),
        ).fetchone()["created_at"]
        samples.append((next_at - reply_at).total_seconds())
    assert statistics.median(samples) < 1.0, samples
