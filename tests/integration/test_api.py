"""The HTTP API as a black box: a real console process, real HTTP, bearer tokens made by the
CLI. No token gets 401, a viewer cannot approve, bad input names the problem and writes
nothing, and what the API says agrees with the CLI's read model."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from engine_adapter.model.identity import os_user
from engine_adapter.testing import harness

GATED = """
slug: gated
steps:
  - id: build
    run_command: echo built {{payload.v}}
  - id: ship
    human_gate: "Ship it?"
  - id: after
    run_command: echo shipped
"""


def call(base: str, method: str, path: str, token: str | None = None, body: Any = None):
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    request = urllib.request.Request(base + "/api/v1" + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers


def token(db_url: str, name: str, *roles: str) -> str:
    """A token acting as account name (added first, by the CLI's admin account, so the token
    is one minted for another account: delegated)."""
    added = harness.run_cli(db_url, "user", "add", name)
    assert added.returncode == 0 or "exists" in added.stderr, added.stderr
    done = harness.run_cli(db_url, "token", "create", name, *[f"--role={r}" for r in roles])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def api(db_url, procs) -> str:
    procs.start("conductor")
    procs.start("bots")
    port = harness.free_port()
    procs.start("console", args=["--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    harness.wait_for(
        lambda: harness.answers(base + "/api/v1/openapi.json"),
        timeout=90,
        interval=0.3,
        what="the console to serve",
    )
    return base


def count(conn, table: str) -> int:
    return conn.execute(f"select count(*) as n from {table}").fetchone()["n"]


def test_tokens_roles_and_a_run_driven_through_the_api(db_url, conn, apply, api, procs):
    apply(GATED)
    viewer = token(db_url, "dash", "viewer")
    operator = token(db_url, "ci", "operator")
    approver = token(db_url, "lead", "approver")
    assert viewer.startswith("tl_api_")
    stored = conn.execute("select token_hash from threadline.api_tokens").fetchall()
    assert all(row["token_hash"] != viewer for row in stored)  # only hashes are kept

    status, _answer, headers = call(api, "GET", "/runs")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert call(api, "GET", "/runs", "tl_api_wrong")[0] == 401

    status, started, _ = call(
        api, "POST", "/runs", operator, {"workflow": "gated", "payload": {"v": 1}}
    )
    assert status == 200 and started["created"]
    run_id = started["run_id"]
    assert call(api, "POST", "/runs", viewer, {"workflow": "gated"})[0] == 403
    harness.wait_for_state(procs.url, run_id, "waiting", timeout=30)

    status, run, _ = call(api, "GET", f"/runs/{run_id}", viewer)
    assert status == 200 and run["gate"]["step"] == "ship"
    cli_view = json.loads(harness.run_cli(db_url, "show", run_id, "--json").stdout)
    assert run["steps"] == cli_view["steps"]  # the one read model
    status, listed, _ = call(api, "GET", "/runs?workflow=gated", viewer)
    assert [r["run_id"] for r in listed["runs"]] == [run_id]

    status, refused, _ = call(api, "POST", f"/runs/{run_id}/approve", viewer, {})
    assert status == 403 and "needs the approver role" in refused["error"]
    status, refused, _ = call(api, "POST", f"/runs/{run_id}/approve", operator, {})
    assert status == 403
    assert count(conn, "threadline.decisions") == 0
    status, decided, _ = call(api, "POST", f"/runs/{run_id}/approve", approver, {"reason": "ok"})
    assert status == 200 and decided["decision"] == "approve"
    harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    status, thread, _ = call(api, "GET", f"/runs/{run_id}/thread", viewer)
    decision = next(e for e in thread if e["kind"] == "decision")
    assert decision["author"] == f"lead, via a token minted by {os_user()}"
    assert decision["data"]["via"] == "api" and decision["data"]["minted_by"] == os_user()

    assert harness.run_cli(db_url, "token", "revoke", "dash").returncode == 0
    assert call(api, "GET", "/runs", viewer)[0] == 401


def test_bad_input_names_the_problem_and_writes_nothing(db_url, conn, apply, api):
    apply(GATED)
    operator = token(db_url, "ci", "operator", "approver")
    before = (count(conn, "threadline.run_threads"), count(conn, "threadline.workflow_versions"))
    cases = [
        ("POST", "/runs", b"{not json", 400, "not valid JSON"),
        ("POST", "/runs", [1, 2], 400, "must be a JSON object"),
        ("POST", "/runs", {"payload": {}}, 400, "missing field(s) ['workflow']"),
        ("POST", "/runs", {"workflow": "gated", "colour": 1}, 400, "unknown field(s) ['colour']"),
        ("POST", "/runs", {"workflow": "nope"}, 404, "no workflow 'nope'"),
        ("GET", "/runs?state=sideways", None, 400, "state: 'sideways' is not a run state"),
        ("GET", "/runs?limit=0", None, 400, "limit: 0 must be from 1 to 500"),
        ("GET", "/runs/00000000-0000-0000-0000-000000000000", None, 404, "no run"),
        ("POST", "/workflows", {"recipe": "slug: x\nsteps: []\n"}, 422, "steps"),
        ("DELETE", "/runs", None, 405, "DELETE is not allowed here"),
    ]
    for method, path, body, want, says in cases:
        status, answer, _ = call(api, method, path, operator, body)
        assert status == want and says in answer["error"], (path, body, answer)
    after = (count(conn, "threadline.run_threads"), count(conn, "threadline.workflow_versions"))
    assert after == before
    status, applied, _ = call(api, "POST", "/workflows", operator, {"recipe": GATED + "\n"})
    assert status == 200 and applied["changed"] is False  # the same recipe: no new version
    status, versions, _ = call(api, "GET", "/workflows/gated/versions", operator)
    assert status == 200 and [v["version"] for v in versions] == [1]


def test_the_openapi_document_lists_every_route(api):
    from console.api import ROUTES

    status, doc, _ = call(api, "GET", "/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    listed = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert listed == {(r.method, "/api/v1" + r.path) for r in ROUTES}


def test_proposals_through_the_api(db_url, conn, apply, api):
    apply(GATED + "allow_proposals: true\n")
    operator = token(db_url, "ci", "operator")
    approver = token(db_url, "lead", "approver")
    status, wf, _ = call(api, "GET", "/workflows/gated", operator)
    changed = GATED.replace("echo shipped", "echo shipped twice") + "allow_proposals: true\n"
    body = {"base_hash": "sha256:" + wf["hash"], "recipe": changed, "summary": "say it twice"}
    status, made, _ = call(api, "POST", "/workflows/gated/proposals", operator, body)
    assert status == 200 and made["risk"] == "high" and made["status"] == "open"
    pid = made["id"]
    assert call(api, "POST", f"/proposals/{pid}/approve", operator, {})[0] == 403
    assert call(api, "POST", f"/proposals/{pid}/apply", operator, {})[0] == 403  # not approved
    status, _, _ = call(api, "POST", f"/proposals/{pid}/approve", approver, {"note": "ok"})
    assert status == 200
    status, done, _ = call(api, "POST", f"/proposals/{pid}/apply", operator, {})
    assert status == 200 and done["version"] == 2
    status, shown, _ = call(api, "GET", f"/proposals/{pid}", operator)
    assert shown["status"] == "applied"
    assert shown["reviewed_by"] == f"lead, via a token minted by {os_user()}"
    assert call(api, "GET", "/proposals/x1", operator)[0] == 400
    assert call(api, "GET", "/proposals/999", operator)[0] == 404


def test_history_diff_and_rollback_through_the_api(db_url, conn, apply, api):
    apply(GATED)
    apply(GATED.replace("echo shipped", "echo shipped again"))
    viewer, operator = token(db_url, "v", "viewer"), token(db_url, "o", "operator")
    status, diff, _ = call(api, "GET", "/workflows/gated/diff?a=1&b=2", viewer)
    assert status == 200 and "+    run_command: echo shipped again" in diff["diff"]
    assert call(api, "GET", "/workflows/gated/diff?a=1", viewer)[0] == 400
    assert call(api, "POST", "/workflows/gated/rollback", viewer, {"to": "1"})[0] == 403
    status, back, _ = call(api, "POST", "/workflows/gated/rollback", operator, {"to": "1"})
    assert status == 200 and back == {"slug": "gated", "version": 3, "rolled_back_from": 1}
    status, again, _ = call(api, "POST", "/workflows/gated/rollback", operator, {"to": "1"})
    assert status == 409 and "nothing to roll back" in again["error"]  # Conflict: already current
    status, history, _ = call(api, "GET", "/workflows/gated/versions", viewer)
    assert [(v["version"], v["source"]) for v in history] == [
        (3, "rollback"),
        (2, "update"),
        (1, "create"),
    ]
