"""Proposals hold (issue 22, finding 9), through the real doors: the CLI, the HTTP API with
bearer tokens, a run request that carries its workflow, and the one function every review goes
through.

- A change to a gate (its `if`, approvers, …), notify, workdir, network, limits, webhooks,
  sub-workflows, agent tools or env is high risk (tests/unit/test_proposal_risk.py has each).
- Nobody reviews a proposal they stand behind: its proposer (through whatever door or token), or
  the person who started the run whose agent made it.
- A workflow marked `protected: true` takes a high-risk change only through a proposal someone
  else approved: a direct apply (CLI, API, a run request, a rollback) is refused with a clear
  message and writes nothing; a change that is not high risk still applies directly.
"""

from __future__ import annotations

import json

import pytest
from test_identities import api, console_api  # the HTTP API as its callers meet it

from engine_adapter.catalog import proposals
from engine_adapter.model.identity import Actor, os_user
from engine_adapter.recipes.recipes import RecipeError, load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

PROTECTED = """
slug: release
allow_proposals: true
protected: true
steps:
  - id: build
    run_command: echo building
  - id: approve
    human_gate: "Ship?"
    approvers: [alice]
  - id: ship
    run_command: echo shipping
"""
# The gate never asks: the change an operator must not make alone.
UNGATED = PROTECTED.replace("    approvers: [alice]", '    approvers: [alice]\n    if: "false"')
REFUSED = "workflow release is protected: a high-risk change (gate approve: if changes)"
ALICE = Actor("alice", "console", roles=frozenset({"approver"}))


def versions(conn, slug: str = "release") -> list[tuple[int, str]]:
    found = conn.execute(
        "select version, source from threadline.workflow_versions where slug = %s order by 1",
        (slug,),
    ).fetchall()
    return [(v["version"], v["source"]) for v in found]


def current(conn, slug: str = "release") -> dict:
    return conn.execute(
        "select version, hash, recipe from threadline.workflows where slug = %s", (slug,)
    ).fetchone()


def propose(db_url: str, conn, recipe: str, summary: str = "change") -> dict:
    request = {
        "workflow": "release",
        "base_hash": "sha256:" + current(conn)["hash"],
        "summary": summary,
        "proposed_workflow": recipe,
    }
    done = harness.run_cli(db_url, "propose", stdin=json.dumps(request))
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["proposal"]


def ungate(conn, actor: Actor, run_id: str | None = None) -> dict:
    """UNGATED proposed by actor (an agent's, in run_id), as the one function every door calls."""
    hash_ = current(conn)["hash"]
    recipe = load_recipe_text(UNGATED)
    return proposals.propose(conn, "release", hash_, recipe, "skip it", actor, run_id=run_id)


def status_of(conn, proposal_id: int) -> str:
    return proposals.get(conn, proposal_id)["status"]


def token(db_url: str, account: str, role: str) -> str:
    assert harness.run_cli(db_url, "user", "add", account).returncode == 0
    minted = harness.run_cli(db_url, "token", "create", account, "--role", role)
    assert minted.returncode == 0, minted.stderr
    return minted.stdout.strip()


def test_protected_needs_proposals_and_is_true_or_false():
    with pytest.raises(RecipeError, match="protected: true needs allow_proposals: true"):
        load_recipe_text(PROTECTED.replace("allow_proposals: true\n", ""))
    with pytest.raises(RecipeError, match='protected: "yes" must be true or false'):
        load_recipe_text(PROTECTED.replace("protected: true", 'protected: "yes"'))
    # Unset, it is left out of the canonical recipe: no existing workflow changes its hash.
    assert "protected" not in load_recipe_text(PROTECTED.replace("protected: true\n", "")).to_dict()


def test_a_gate_change_to_a_protected_workflow_is_refused_at_every_direct_door(
    db_url, conn, apply, tmp_path
):
    apply(PROTECTED)
    before = current(conn)
    path = tmp_path / "ungated.yaml"
    path.write_text(UNGATED)

    applied = harness.run_cli(db_url, "recipe", "apply", str(path))
    assert applied.returncode == 10 and REFUSED in applied.stderr, applied.stderr
    assert "someone other than its author approved" in applied.stderr

    request = {"workflow": load_recipe_text(UNGATED).to_dict(), "payload": {}}
    ran = harness.run_cli(db_url, "run", stdin=json.dumps(request))
    envelope = json.loads(ran.stdout)
    assert ran.returncode == 10 and envelope["error"]["type"] == "invalid_workflow", envelope
    assert any(REFUSED in detail for detail in envelope["error"]["details"]), envelope

    assert current(conn) == before and versions(conn) == [(1, "create")]
    assert conn.execute("select count(*) as n from threadline.run_threads").fetchone()["n"] == 0


def test_a_low_risk_change_to_a_protected_workflow_still_applies_directly(
    db_url, conn, apply, tmp_path
):
    apply(PROTECTED)
    path = tmp_path / "described.yaml"
    path.write_text(PROTECTED + "description: the nightly release\n")
    applied = harness.run_cli(db_url, "recipe", "apply", str(path))
    assert applied.returncode == 0 and "release v2" in applied.stdout, applied.stderr
    path.write_text(PROTECTED.replace('"Ship?"', '"Ship to production?"'))  # medium: the question
    assert harness.run_cli(db_url, "recipe", "apply", str(path)).returncode == 0
    assert versions(conn) == [(1, "create"), (2, "update"), (3, "update")]


def test_a_high_risk_change_goes_through_a_proposal_someone_else_approved(
    db_url, conn, apply, procs
):
    apply(PROTECTED)
    proposal = propose(db_url, conn, UNGATED, "skip the gate on hotfixes")
    assert proposal["risk"] == "high" and "gate approve: if changes" in proposal["risk_reasons"]

    # The proposer (this OS account, through the CLI) may not approve it.
    own = harness.run_cli(db_url, "proposal", "approve", str(proposal["id"]))
    assert own.returncode == 2 and "someone else reviews it" in own.stderr, own.stderr
    assert status_of(conn, proposal["id"]) == "open"

    # Nor through the API with a token of their own.
    base = console_api(procs)
    own_token = token(db_url, os_user(), "approver")
    status, answer = api(base, f"/proposals/{proposal['id']}/approve", own_token, {"note": "ok"})
    assert status == 403 and "someone else reviews it" in answer["error"], answer
    assert status_of(conn, proposal["id"]) == "open"

    # Nor can an operator apply the change directly through the API, or apply the proposal
    # before anyone approved it.
    operator = token(db_url, "carol", "operator")
    status, answer = api(base, "/workflows", operator, {"recipe": UNGATED})
    assert status == 403 and REFUSED in answer["error"], answer
    status, answer = api(base, f"/proposals/{proposal['id']}/apply", operator, {})
    assert status == 403 and "is open, not approved" in answer["error"], answer
    assert versions(conn) == [(1, "create")]

    # Alice, signed in to the console as herself, approves; then it applies.
    proposals.review(conn, proposal["id"], True, ALICE, "hotfixes only")
    done = harness.run_cli(db_url, "proposal", "apply", str(proposal["id"]))
    assert done.returncode == 0 and "version 2" in done.stdout, done.stderr
    assert versions(conn) == [(1, "create"), (2, "proposal")]
    assert current(conn)["recipe"]["steps"][1]["if"] == "false"

    # A rollback is a direct change too: back to the gate that asks is high risk again.
    status, answer = api(base, "/workflows/release/rollback", operator, {"to": "1"})
    assert status == 403 and "workflow release is protected" in answer["error"], answer
    rolled = harness.run_cli(db_url, "recipe", "rollback", "release", "--to", "1")
    assert rolled.returncode == 2 and "workflow release is protected" in rolled.stderr
    assert versions(conn) == [(1, "create"), (2, "proposal")]


def test_the_person_who_started_an_agents_run_does_not_review_its_proposal(conn, apply):
    apply(PROTECTED)
    run_id = spawn(conn, "release", trigger={"kind": "manual", "caller": "alice"}).run_id
    made = ungate(conn, Actor("helper (agent)", "system"), run_id)
    with pytest.raises(proposals.ProposalError, match="in a run alice started"):
        proposals.review(conn, made["id"], True, ALICE, None)
    assert status_of(conn, made["id"]) == "open"
    proposals.review(conn, made["id"], True, Actor("bob", "console"), None)
    assert status_of(conn, made["id"]) == "approved"


def test_the_proposer_through_another_door_or_a_record_for_someone_else_does_not_review(
    conn, apply
):
    apply(PROTECTED)
    made = ungate(conn, Actor("alice", "api", minted_by=os_user()))
    assert made["proposed_by"] == f"alice, via a token minted by {os_user()}"
    for actor in (
        Actor("bob", "cli", on_behalf_of="dave"),  # recorded for someone: never a review
        Actor("alice", "console"),  # the proposer, signed in to the console
        Actor("alice", "cli"),  # the proposer, as an OS account
    ):
        with pytest.raises(proposals.ProposalError, match="someone else reviews it"):
            proposals.review(conn, made["id"], True, actor, None)
    assert status_of(conn, made["id"]) == "open"
    proposals.review(conn, made["id"], False, Actor("bob", "console"), "not now")
    assert status_of(conn, made["id"]) == "rejected"
