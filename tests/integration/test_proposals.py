"""Proposals: a change to a workflow that opted in is proposed (by a program through `threadline
propose`, or by an agent's tool), reviewed by someone else, and applied only while its base is
still current and it has not expired."""

from __future__ import annotations

import json

from engine_adapter.catalog import proposals
from engine_adapter.catalog.bot_config import apply_bots, parse_bots
from engine_adapter.cli import contract
from engine_adapter.model.identity import Actor
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.agent_server import ScriptedModel, answer, tool_call

BASE = """
slug: nightly
allow_proposals: true
steps:
  - id: test
    run_command: echo testing
  - id: approve
    human_gate: "Ship?"
"""
# A clearer question: a medium change (a change to who decides the gate would be high).
CLEARER = BASE.replace('human_gate: "Ship?"', 'human_gate: "Ship it to production?"')
RISKIER = BASE.replace("echo testing", "echo testing && echo deploying")


def propose(db_url: str, request: dict) -> tuple[dict, int]:
    done = harness.run_cli(db_url, "propose", stdin=json.dumps(request))
    envelope = json.loads(done.stdout)
    contract.validator("proposal").validate(envelope)
    return envelope, done.returncode


def current_hash(db_url: str) -> str:
    done = harness.run_cli(db_url, "validate", stdin=json.dumps({"workflow": BASE}))
    return json.loads(done.stdout)["workflow_hash"]


def test_propose_review_apply_and_a_stale_proposal(db_url, conn, apply):
    apply(BASE)
    base = current_hash(db_url)
    made, code = propose(
        db_url,
        {"workflow": "nightly", "base_hash": base, "proposed_workflow": RISKIER, "summary": "ship"},
    )
    assert code == 0 and made["status"] == "proposal_created"
    risky = made["proposal"]
    assert risky["risk"] == "high" and "step test runs a new command" in risky["risk_reasons"]
    assert "+    run_command: echo testing && echo deploying" in risky["diff"]  # as written
    made, _ = propose(
        db_url,
        {"workflow": "nightly", "base_hash": base, "proposed_workflow": CLEARER, "summary": "ask"},
    )
    clearer = made["proposal"]
    assert clearer["risk"] == "medium"

    refused = harness.run_cli(db_url, "proposal", "approve", str(clearer["id"]))
    assert refused.returncode == 2 and "someone else reviews it" in refused.stderr
    proposals.review(conn, clearer["id"], True, Actor("alice", "console"), "good idea")
    proposals.review(conn, risky["id"], True, Actor("alice", "console"), None)
    applied = harness.run_cli(db_url, "proposal", "apply", str(clearer["id"]))
    assert applied.returncode == 0 and "version 2" in applied.stdout
    versions = conn.execute(
        "select version, source from threadline.workflow_versions where slug = 'nightly'"
        " order by version"
    ).fetchall()
    assert [(v["version"], v["source"]) for v in versions] == [(1, "create"), (2, "proposal")]
    # The other proposal was based on version 1: applying it now would undo version 2.
    stale = harness.run_cli(db_url, "proposal", "apply", str(risky["id"]))
    assert stale.returncode == 2 and "is stale" in stale.stderr
    assert proposals.get(conn, risky["id"])["status"] == "stale"
    assert len(conn.execute("select 1 from threadline.workflow_versions").fetchall()) == 2


def test_refusals_name_the_problem_and_write_nothing(db_url, conn, apply):
    apply(BASE)
    apply(BASE.replace("slug: nightly", "slug: closed").replace("allow_proposals: true\n", ""))
    base = current_hash(db_url)
    cases = [
        ({"workflow": "closed", "base_hash": base, "proposed_workflow": BASE.replace(
            "nightly", "closed"), "summary": "x"}, 30, "does not take proposals"),
        ({"workflow": "nightly", "base_hash": "sha256:" + "1" * 64, "proposed_workflow": RISKIER,
          "summary": "x"}, 20, "is not workflow nightly's current version"),
        ({"workflow": "nightly", "base_hash": base, "proposed_workflow": "slug: nightly\n",
          "summary": "x"}, 10, "the proposed workflow is invalid"),
        ({"workflow": "nightly", "base_hash": base, "proposed_workflow": BASE, "summary": "x"},
         10, "is the current one"),
        ({"workflow": "nightly", "base_hash": base, "summary": "x"}, 20, "does not match"),
    ]  # fmt: skip
    for request, want, says in cases:
        envelope, code = propose(db_url, request)
        assert code == want and says in envelope["error"]["message"], (request, envelope)
    assert conn.execute("select count(*) as n from threadline.proposals").fetchone()["n"] == 0
    made, _ = propose(
        db_url,
        {"workflow": "nightly", "base_hash": base, "proposed_workflow": CLEARER, "summary": "x"},
    )
    conn.execute("update threadline.proposals set expires_at = now() - interval '1 second'")
    expired = harness.run_cli(db_url, "proposal", "reject", str(made["proposal"]["id"]), "--note=n")
    assert expired.returncode == 2 and "expired" in expired.stderr
    assert proposals.get(conn, made["proposal"]["id"])["status"] == "expired"


def test_an_agent_proposes_a_change_to_its_own_workflow(conn, apply, procs):
    proposed = """slug: agent-flow
allow_proposals: true
bot: helper
steps:
  - id: think
    dispatch_task: improve this workflow
    tools: [propose_change]
  - id: check
    run_command: echo checked
"""
    script = [
        answer(None, tool_call("c1", "propose_change", {"recipe": "slug: x", "summary": "bad"})),
        answer(None, tool_call("c2", "propose_change", {"recipe": proposed, "summary": "check"})),
        answer("proposed"),
    ]
    with ScriptedModel(script) as model:
        apply_bots(conn, parse_bots({"helper": {"base_url": model.base_url, "model": "m"}}))
        apply(proposed.replace("  - id: check\n    run_command: echo checked\n", ""))
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent-flow").run_id
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    results = [m["content"] for m in model.requests[2]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("error: the proposed recipe is invalid")
    assert results[1].startswith("proposal #") and "risk high" in results[1]
    row = conn.execute("select * from threadline.proposals").fetchone()
    assert row["status"] == "open" and str(row["run_id"]) == run_id
    assert row["proposed_by"] == "helper (agent)" and row["risk"] == "high"
    assert any(e["text"].startswith("Step think proposed a change") for e in view["thread"])
    current = conn.execute("select version from threadline.workflows where slug = 'agent-flow'")
    assert current.fetchone()["version"] == 1  # proposed, not made
