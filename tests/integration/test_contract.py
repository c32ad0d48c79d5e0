"""The runtime contract as a black box: `threadline run | resume | validate` as real processes,
one JSON request on stdin, one envelope on stdout and NDJSON on stderr, each checked against the
published schemas, and the exit codes."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest
import test_webhooks

from engine_adapter.cli import contract
from engine_adapter.model import domain
from engine_adapter.testing import harness

TWO_STEPS = """
slug: two
steps:
  - id: one
    run_command: echo first {{payload.who}}
  - id: two
    run_command: echo second
"""
# The program that starts a run resumes it with its token: the gate lets its initiator decide.
GATED = """
slug: gated
steps:
  - id: build
    run_command: echo built
  - id: ship
    human_gate: "Ship it?"
    self_approval: true
  - id: after
    run_command: echo shipped
"""


def call(db_url: str, command: str, request: Any) -> tuple[dict, list[dict], int]:
    """One contract command: its envelope (checked), its events (checked) and exit code."""
    text = request if isinstance(request, str) else json.dumps(request)
    done = harness.run_cli(db_url, command, stdin=text, timeout=90)
    assert done.stdout.count("\n}") == 1, done.stdout  # exactly one envelope
    envelope = json.loads(done.stdout)
    answer = "validation" if command == "validate" else "envelope"
    contract.validator(answer).validate(envelope)
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    for event in events:
        contract.validator("event").validate(event)
    return envelope, events, done.returncode


@pytest.fixture
def running(procs):
    procs.start("conductor")
    procs.start("bots")
    return procs


def test_a_run_that_completes(db_url, apply, running):
    apply(TWO_STEPS)
    envelope, events, code = call(db_url, "run", {"workflow": "two", "payload": {"who": "ann"}})
    assert code == 0
    assert envelope["ok"] and envelope["status"] == "ok" and envelope["error"] is None
    assert envelope["output"] == "second\n"
    assert [(s["id"], s["status"], s["attempt"]) for s in envelope["steps"]] == [
        ("one", "completed", 1),
        ("two", "completed", 1),
    ]
    assert envelope["steps"][0]["output"] == "first ann\n"
    kinds = [e["type"] for e in events]
    assert kinds[0] == "run.started" and kinds[-1] == "run.finished"
    assert kinds.count("step.completed") == 2
    assert kinds.index("step.completed") < len(kinds) - 1
    assert {e["run_id"] for e in events} == {envelope["run_id"]}


def test_a_gate_in_a_run_it_started_pauses_the_followed_run_and_resumes_it(
    db_url, conn, apply, running
):
    """A gate in a sub-workflow (or a branch, an item) pauses the run the contract follows: it
    said nothing of it, and a policy's timeout then cancelled the run that waited for approval.
    The token is the child gate's; resuming names the followed run, and no unrelated run."""
    apply(GATED)
    apply(
        "slug: outer\nsteps:\n  - id: call\n    workflow: gated\n"
        "  - id: end\n    run_command: echo end\n"
    )
    paused, events, code = call(
        db_url, "run", {"workflow": "outer", "policy": {"timeout_ms": 8000}}
    )
    assert code == 0 and paused["status"] == "needs_approval", paused
    approval = paused["requires_approval"]
    child = conn.execute(
        "select run_id from threadline.run_threads where parent_run_id = %s", (paused["run_id"],)
    ).fetchone()["run_id"]
    assert approval["run_id"] == str(child) and approval["step"] == "ship"
    assert approval["prompt"] == "Ship it?"
    assert "approval.required" in [e["type"] for e in events]
    harness.wait_for_state(db_url, paused["run_id"], "running")  # waiting, not cancelled
    other, _, _ = call(db_url, "run", {"workflow": "gated"})
    token = approval["resume_token"]
    refused, _, code = call(db_url, "resume", {"run_id": other["run_id"], "resume_token": token})
    assert code == 20 and "not one of run" in refused["error"]["message"]
    done, events, code = call(db_url, "resume", {"run_id": paused["run_id"], "resume_token": token})
    assert code == 0 and done["status"] == "ok" and done["output"] == "end\n", done
    assert events[0]["type"] == "approval.approved"


def test_pause_resume_by_token_and_a_token_used_twice(db_url, conn, apply, running):
    apply(GATED)
    paused, events, code = call(db_url, "run", {"workflow": "gated"})
    assert code == 0 and paused["status"] == "needs_approval" and paused["ok"]
    approval = paused["requires_approval"]
    assert approval["step"] == "ship" and approval["prompt"] == "Ship it?"
    assert approval["resume_token"].startswith("tl_rt_")
    assert events[-2]["type"] == "approval.required" and events[-2]["step"] == "ship"
    # Only the token's hash is kept.
    stored = conn.execute("select token_hash from threadline.resume_tokens").fetchall()
    assert len(stored) == 1 and stored[0]["token_hash"] != approval["resume_token"]
    run_id = paused["run_id"]
    request = {"run_id": run_id, "resume_token": approval["resume_token"], "reason": "looks good"}
    done, events, code = call(db_url, "resume", request)
    assert code == 0 and done["status"] == "ok" and done["output"] == "shipped\n"
    assert [e["type"] for e in events][:2] == ["approval.approved", "run.resumed"]
    again, _, code = call(db_url, "resume", request)
    assert code == 20 and again["error"]["type"] == "resume_refused"
    assert "used already" in again["error"]["message"]
    audit = conn.execute(
        "select outcome, via, decision, actor from threadline.decision_audit order by id"
    ).fetchall()
    assert [(a["outcome"], a["via"], a["decision"]) for a in audit] == [
        ("decided", "cli", "approve"),
        ("refused", "cli", "approve"),
    ]


def test_refused_tokens_write_nothing_but_their_audit(db_url, conn, apply, running):
    apply(GATED)
    first, _, _ = call(db_url, "run", {"workflow": "gated", "idempotency_key": "a"})
    second, _, _ = call(db_url, "run", {"workflow": "gated", "idempotency_key": "b"})
    token = first["requires_approval"]["resume_token"]
    cases = {
        "another run's": {"run_id": second["run_id"], "resume_token": token},
        "unknown": {"run_id": first["run_id"], "resume_token": "tl_rt_nope"},
    }
    for what, request in cases.items():
        refused, _, code = call(db_url, "resume", request)
        assert code == 20 and refused["error"]["type"] == "resume_refused", what
    conn.execute("update threadline.resume_tokens set expires_at = now() - interval '1 second'")
    expired, _, code = call(db_url, "resume", {"run_id": first["run_id"], "resume_token": token})
    assert code == 20 and "expired" in expired["error"]["message"]
    assert conn.execute("select count(*) as n from threadline.decisions").fetchone()["n"] == 0
    assert harness.run_cli(db_url, "show", first["run_id"], "--json").returncode == 0
    refusals = conn.execute("select outcome from threadline.decision_audit order by id").fetchall()
    assert [r["outcome"] for r in refusals] == ["refused"] * 3


def test_a_denial_cancels_and_a_failure_fails_with_exit_zero(db_url, apply, running):
    apply(GATED)
    paused, _, _ = call(db_url, "run", {"workflow": "gated"})
    token = paused["requires_approval"]["resume_token"]
    denied, events, code = call(
        db_url, "resume", {"run_id": paused["run_id"], "resume_token": token, "decision": "deny"}
    )
    assert code == 0 and denied["status"] == "cancelled" and not denied["ok"]
    assert events[0]["type"] == "approval.denied"
    apply(
        "slug: broken\nsteps:\n  - id: lint\n    run_command: exit 1\n    on_failure: continue\n"
        "  - id: boom\n    run_command: echo oops; exit 3\n"
    )
    failed, _, code = call(db_url, "run", {"workflow": "broken"})
    assert code == 0 and failed["status"] == "failed" and not failed["ok"]
    assert failed["error"]["type"] == "step_failed"
    assert failed["error"]["message"].startswith("step boom failed")


def test_bad_requests_and_workflows_name_the_problem(db_url, apply):
    apply(TWO_STEPS)
    cases = [
        ("not json", 20, "invalid_request"),
        ({"payload": {}}, 20, "invalid_request"),
        ({"workflow": "two", "colour": "red"}, 20, "invalid_request"),
        ({"workflow": "two", "policy": {"timeout_ms": 0}}, 20, "invalid_request"),
        ({"workflow": "nope"}, 10, "workflow_not_found"),
        ({"workflow": {"slug": "x", "steps": [{"id": "a"}]}}, 10, "invalid_workflow"),
        ({"workflow": "two", "workflow_hash": "sha256:" + "0" * 64}, 20, "workflow_hash_mismatch"),
        ({"workflow": "two", "policy": {"max_steps": 1}}, 30, "policy_violation"),
    ]
    for request, want_code, kind in cases:
        envelope, _, code = call(db_url, "run", request)
        assert (code, envelope["error"]["type"]) == (want_code, kind), request
        assert envelope["run_id"] is None and envelope["error"]["message"]
    unknown, _, _ = call(db_url, "run", {"workflow": "two", "colour": "red"})
    assert unknown["error"]["details"] == [
        "(request): Additional properties are not allowed ('colour' was unexpected)"
    ]
    invalid, _, _ = call(db_url, "run", {"workflow": {"slug": "x", "steps": [{"id": "a"}]}})
    assert any("steps[0]" in d for d in invalid["error"]["details"])


def test_pinned_hash_idempotency_and_validate(db_url, conn, apply, running):
    apply(TWO_STEPS)
    checked, _, code = call(db_url, "validate", {"workflow": TWO_STEPS})
    assert code == 0 and checked["status"] == "valid"
    pin = checked["workflow_hash"]
    request = {
        "workflow": "two",
        "workflow_hash": pin,
        "idempotency_key": "k",
        "payload": {"who": "a"},
    }
    first, events, code = call(db_url, "run", request)
    assert code == 0 and first["status"] == "ok" and events[0]["created"] is True
    again, events, code = call(db_url, "run", request)
    assert code == 0 and again["run_id"] == first["run_id"] and events[0]["created"] is False
    conflict, _, code = call(db_url, "run", {**request, "payload": {"who": "bob"}})
    assert code == 20 and conflict["error"]["type"] == "idempotency_conflict"
    assert conn.execute("select count(*) as n from threadline.run_threads").fetchone()["n"] == 1
    bad, _, code = call(db_url, "validate", {"workflow": {"slug": "Bad", "steps": []}})
    assert code == 10 and bad["status"] == "invalid" and bad["errors"]


def test_policy_timeout_parallelism_and_output_cap(db_url, apply, running):
    apply("slug: slow\nsteps:\n  - id: nap\n    run_command: sleep 60\n")
    slow, _events, code = call(db_url, "run", {"workflow": "slow", "policy": {"timeout_ms": 1500}})
    assert code == 30 and slow["status"] == "cancelled"
    assert slow["error"]["type"] == "policy_violation" and "1.5 s" in slow["error"]["message"]
    apply("""
slug: wide
steps:
  - id: fan
    parallel:
      a: [{id: a1, run_command: "true"}]
      b: [{id: b1, run_command: "true"}]
      c: [{id: c1, run_command: "true"}]
""")
    wide, _, code = call(db_url, "run", {"workflow": "wide", "policy": {"max_parallel": 2}})
    assert code == 30 and "step fan runs up to 3 branches" in wide["error"]["message"]
    apply("slug: loud\nsteps:\n  - id: shout\n    run_command: printf '%0.sx' $(seq 100)\n")
    loud, _, code = call(db_url, "run", {"workflow": "loud", "policy": {"max_output_bytes": 10}})
    assert code == 0 and loud["steps"][0]["output"] == "x" * 10
    assert loud["steps"][0]["output_truncated"] is True


def test_the_schemas_speak_the_domains_words():
    step_status = contract.schema("envelope")["$defs"]["step"]["properties"]["status"]["enum"]
    assert step_status == list(domain.STEP_STATUSES)


def test_an_internal_error_is_still_one_envelope():
    """No database answers: exit 40, and still exactly one envelope that names the error."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"host=127.0.0.1 port={port} dbname=x user=x connect_timeout=2"
    done = harness.run_cli(url, "run", stdin='{"workflow": "two"}')
    envelope = json.loads(done.stdout)
    contract.validator("envelope").validate(envelope)
    assert all(line.startswith("{") for line in done.stderr.splitlines())  # NDJSON only
    code = done.returncode
    assert code == 40 and envelope["error"]["type"] == "internal_error"
    assert "OperationalError" in envelope["error"]["message"]


# -- resume links: POST /resume/<token> on the ingress ---------------------------------------------
hooks = test_webhooks.hooks  # the fixture that starts `threadline hooks` on a free port


def link(base: str, token: str, body: Any) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, answer, _ = test_webhooks.request(base, "POST", f"/resume/{token}", data)
    return status, answer


def test_a_resume_link_decides_once_as_its_subject(db_url, conn, apply, running, hooks, tmp_path):
    apply(GATED)
    base = hooks(env={})
    paused, _, _ = call(db_url, "run", {"workflow": "gated"})
    token, run_id = paused["requires_approval"]["resume_token"], paused["run_id"]
    for bad, why in (
        (b"not json", "not JSON"),
        ({"decision": "maybe"}, "approve or deny"),
        ({"decision": "approve", "extra": 1}, "must be"),
    ):
        status, answer = link(base, token, bad)
        assert status == 400 and why in answer["error"], bad
    with urllib.request.urlopen(f"{base}/resume/{token}?decision=approve", timeout=30) as page:
        assert page.headers["Content-Type"].startswith("text/html")
        assert page.headers["Referrer-Policy"] == "no-referrer" and b"Approve" in page.read()
    assert conn.execute("select count(*) as n from threadline.decisions").fetchone()["n"] == 0
    status, answer = link(base, "tl_rt_guess", {"decision": "approve"})
    assert status == 403 and answer["error"] == "the resume token is not valid"
    status, answer = link(base, token, {"decision": "approve", "reason": "from the chat button"})
    assert status == 200 and answer["run_id"] == run_id and answer["decision"] == "approve"
    subject = answer["by"]
    view = harness.wait_for_state(running.url, run_id, "completed", timeout=30)
    decision = next(e for e in view["thread"] if e["kind"] == "decision")
    assert decision["author"] == subject and "from the chat button" in decision["text"]
    status, answer = link(base, token, {"decision": "deny"})
    assert status == 403 and "used already" in answer["error"]
    audit = conn.execute(
        "select outcome, via, actor from threadline.decision_audit order by id"
    ).fetchall()
    assert [(a["outcome"], a["via"]) for a in audit] == [
        ("refused", "link"),
        ("decided", "link"),
        ("refused", "link"),
    ]
    assert audit[1]["actor"] == subject
    assert token not in (tmp_path / "hooks.log").read_text()  # a credential: never logged


def test_a_link_racing_the_gate_timeout_has_one_winner(db_url, conn, apply, running, hooks):
    apply(GATED.replace('human_gate: "Ship it?"', 'human_gate: "Ship it?"\n    timeout: 2s'))
    base = hooks(env={})
    paused, _, _ = call(db_url, "run", {"workflow": "gated"})
    token, run_id = paused["requires_approval"]["resume_token"], paused["run_id"]
    deadline = datetime.fromisoformat(paused["requires_approval"]["timeout_at"])
    wait = (deadline - datetime.now(UTC)).total_seconds()
    time.sleep(max(0.0, wait))  # the link arrives as the gate times out
    status, _ = link(base, token, {"decision": "approve"})
    view = harness.wait_for_state(running.url, run_id, ("completed", "cancelled"), timeout=30)
    decisions = conn.execute(
        "select decision from threadline.decisions where run_id = %s", (run_id,)
    ).fetchall()
    assert len(decisions) == 1  # one winner, whichever it was
    if status == 200:
        assert decisions[0]["decision"] == "approve" and view["state"] == "completed"
    else:
        assert status == 403 and decisions[0]["decision"] == "timeout"
        assert view["state"] == "cancelled"


def test_every_doors_decisions_and_refusals_are_audited(db_url, conn, apply, running):
    """Not only tokens: a refused approve on the CLI, a 👍 reply by a non-approver and an
    accepted decision each leave their audit row (who, how, why)."""
    from engine_adapter.model.identity import Actor
    from engine_adapter.runs import gates

    apply(GATED.replace('human_gate: "Ship it?"', 'human_gate: "Ship it?"\n    approvers: [bob]'))
    paused, _, _ = call(db_url, "run", {"workflow": "gated"})
    run_id = paused["run_id"]
    refused = harness.run_cli(db_url, "approve", run_id)
    assert refused.returncode == 2 and "not an approver" in refused.stderr
    gates.reply(conn, run_id, "👍 go", Actor("carol", "console"))
    gates.decide(conn, run_id, "approve", Actor("bob", "console"), "fine")
    rows = conn.execute(
        "select actor, via, outcome, why from threadline.decision_audit order by id"
    ).fetchall()
    assert [(r["actor"], r["via"], r["outcome"]) for r in rows] == [
        (rows[0]["actor"], "cli", "refused"),
        ("carol", "console", "refused"),
        ("bob", "console", "decided"),
    ]
    assert "not an approver of gate ship" in rows[0]["why"]


def test_a_gate_without_a_timeout_waits_a_day_by_default(db_url, apply, running):
    apply(GATED)
    paused, _, _ = call(db_url, "run", {"workflow": "gated"})
    approval = paused["requires_approval"]
    deadline = datetime.fromisoformat(approval["timeout_at"])
    left = (deadline - datetime.now(UTC)).total_seconds()
    assert 23.9 * 3600 < left <= 24 * 3600 and approval["on_timeout"] == "deny"
