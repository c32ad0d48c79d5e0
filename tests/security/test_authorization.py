"""One decision point (issue 22): every state change a person makes is decided by
engine_adapter/access/authorization.py, through every door, and audited in
threadline.authorization_audit: a refusal names who, what and why and changes nothing; an
allowed change is audited with it."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from console.users import add_user, list_users
from engine_adapter.access import accounts, api_tokens, authorization
from engine_adapter.access.authorization import Action, Refused
from engine_adapter.catalog import bot_config, proposals, workflows
from engine_adapter.conductor import reruns
from engine_adapter.model.identity import Actor
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs import commands, events, gates, pause, retention, run_limits
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.integration.test_api import api, call, token  # noqa: F401 (api: a fixture)
from tests.security.test_identities import cli_as_nobody

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "slug: plain\nallow_proposals: true\nsteps:\n  - id: one\n    run_command: 'true'\n"
VIEWER = Actor("vic", "console", roles=frozenset({"viewer"}))
APPROVER = Actor("abe", "console", roles=frozenset({"approver"}))
OPERATOR = Actor("otto", "console", roles=frozenset({"operator"}))
ADMIN = Actor("root", "cli", admin=True)
HELPER_BOT = {"helper": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}
# What any refused change could have touched.
STATE = (
    "select (select count(*) from threadline.run_threads) as runs,"
    " (select count(*) from threadline.thread_entries) as entries,"
    " (select count(*) from threadline.workflow_versions) as versions,"
    " (select string_agg(slug || enabled::text, ',') from threadline.workflows) as enabled,"
    " (select count(*) from threadline.proposals) as proposals,"
    " (select string_agg(status, ',' order by id) from threadline.proposals) as statuses,"
    " (select count(*) from threadline.decisions) as decisions,"
    " (select count(*) from threadline.pause) as paused,"
    " (select count(*) from threadline.cleanups) as cleanups,"
    " (select runs_s from threadline.retention_defaults) as retention,"
    " (select count(*) from threadline.api_tokens) as tokens,"
    " (select count(*) from threadline.accounts) as accounts,"
    " (select string_agg(name || model, ',' order by name) from threadline.bots) as bots,"
    " (select string_agg(model || input_per_mtok, ',' order by model)"
    "  from threadline.model_prices) as prices,"
    " (select string_agg(kind || name || max_runs, ',' order by kind, name)"
    "  from threadline.run_limits) as limits"
)


def audit(conn, after: int = 0) -> list[dict[str, Any]]:
    return authorization.audit_since(conn, after)


def last_id(conn) -> int:
    rows = audit(conn)
    return rows[-1]["id"] if rows else 0


# -- the table ---------------------------------------------------------------------------------
def test_every_action_has_a_rule_and_every_rule_a_verb():
    assert set(authorization.RULES) == set(Action)
    for action, rule in authorization.RULES.items():
        assert rule.verb, action
        assert set(rule.roles) <= {"viewer", "operator", "approver"}, action
        assert rule.roles or rule.admin or rule.admin_for_others or action is Action.MANAGE_CHANNELS


def test_no_door_holds_a_role_list_of_its_own():
    """Who may do what is asked of authorization.py only: no `may(...)` and no tuple of role
    names in a door or a domain module."""
    own = re.compile(r"\.may\(|\(\s*\"(operator|approver)\"\s*,\s*\)|\bOPERATE\b|\bDECIDE\s*=\s*\(")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for folder in ("console", "engine_adapter")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.name not in ("authorization.py", "identity.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if own.search(line)
    ]
    where = "engine_adapter/access/authorization.py"
    assert not found, f"role rules outside {where}:\n" + "\n".join(found)


def test_why_not_names_the_role_or_the_admin():
    assert authorization.why_not(VIEWER, Action.CANCEL) == "that needs the operator role"
    assert authorization.why_not(APPROVER, Action.REPLY) is None
    assert "admin action" in (authorization.why_not(OPERATOR, Action.MANAGE_ACCOUNTS) or "")
    assert authorization.why_not(OPERATOR, Action.MINT_TOKEN, account="otto") is None
    assert "admin" in (authorization.why_not(OPERATOR, Action.MINT_TOKEN, account="alice") or "")


# -- the domain functions every door calls, as a console session without the role -------------
def test_each_change_without_its_role_is_refused_audited_and_changes_nothing(conn, apply):
    apply(RECIPE)
    run_id = spawn(conn, "plain").run_id
    current = workflows.get_workflow(conn, "plain")
    changed = load_recipe_text(RECIPE.replace("'true'", "'echo hi'"))
    made = proposals.propose(conn, "plain", current["hash"], changed, "why", OPERATOR)
    # What a refused removal would take away.
    bot_config.set_price(conn, "priced", 1.0, 2.0)
    run_limits.set_limit(conn, "initiator:carl", 5, ADMIN)
    bots = bot_config.parse_bots(HELPER_BOT)
    before, after = conn.execute(STATE).fetchone(), last_id(conn)
    attempts = [
        (Action.SPAWN, lambda a: spawn(conn, "plain", actor=a)),
        (Action.CANCEL, lambda a: commands.cancel_run(conn, run_id, a)),
        (Action.RETRY, lambda a: commands.retry_run(conn, run_id, a)),
        (Action.RERUN, lambda a: reruns.rerun(conn, run_id, "one", a)),
        (Action.DEBUG_EVENT, lambda a: commands.emit_debug_event(conn, run_id, "x", {}, a)),
        (Action.EMIT_EVENT, lambda a: events.emit(conn, "ping", {}, actor=a)),
        (Action.REPLY, lambda a: gates.reply(conn, run_id, "hello", a)),
        (Action.DECIDE, lambda a: gates.decide(conn, run_id, "approve", a)),
        (Action.APPLY_RECIPE, lambda a: workflows.apply_recipe(conn, changed, actor=a)),
        (Action.ROLLBACK, lambda a: workflows.rollback(conn, "plain", "1", a)),
        (Action.ENABLE_WORKFLOW, lambda a: workflows.set_enabled(conn, "plain", False, a)),
        (
            Action.PROPOSE,
            lambda a: proposals.propose(conn, "plain", current["hash"], changed, "again", a),
        ),
        (Action.REVIEW_PROPOSAL, lambda a: proposals.review(conn, made["id"], True, a, None)),
        (Action.APPLY_PROPOSAL, lambda a: proposals.apply(conn, made["id"], a)),
        (Action.PAUSE, lambda a: pause.pause(conn, a, "stop")),
        (Action.CLEANUP, lambda a: retention.cleanup(conn, "test", actor=a)),
        (Action.SET_RETENTION, lambda a: retention.set_default(conn, "runs", "1d", a)),
        (Action.MINT_TOKEN, lambda a: api_tokens.create(conn, "alice", ["viewer"], a)),
        (Action.MANAGE_ACCOUNTS, lambda a: accounts.add(conn, "mallory", a)),
        (Action.CONFIGURE_BOTS, lambda a: bot_config.apply_bots(conn, bots, a)),
        (Action.SET_PRICE, lambda a: bot_config.set_price(conn, "m", 1.0, 2.0, a)),
        (Action.SET_PRICE, lambda a: bot_config.remove_price(conn, "priced", a)),
        (Action.SET_LIMITS, lambda a: run_limits.set_limit(conn, "global", 1, a)),
        (Action.SET_LIMITS, lambda a: run_limits.remove_limit(conn, "initiator:carl", a)),
    ]
    for action, attempt in attempts:
        who = OPERATOR if not authorization.RULES[action].roles else VIEWER
        if action in (Action.DECIDE, Action.REVIEW_PROPOSAL):
            who = OPERATOR  # an operator, not an approver
        with pytest.raises(Refused) as refused:
            attempt(who)
        reason = authorization.why_not(who, action, account="alice")
        assert reason and reason in str(refused.value) and who.name in str(refused.value)
    assert conn.execute(STATE).fetchone() == before  # nothing changed
    rows = audit(conn, after)
    assert [(r["action"], r["outcome"], r["door"]) for r in rows] == [
        (str(a), "refused", "console") for a, _ in attempts
    ]
    assert all(r["reason"] and r["actor"] in ("vic", "otto") for r in rows)
    assert rows[0]["reason"] == "that needs the operator role"


def test_an_allowed_change_is_audited_with_it_and_a_things_own_rule_through_the_layer(conn, apply):
    apply(RECIPE)
    run_id = spawn(conn, "plain", actor=OPERATOR).run_id
    after = last_id(conn) - 1
    commands.cancel_run(conn, run_id, OPERATOR, "done")
    rows = audit(conn, after)
    assert [(r["action"], r["outcome"], r["actor"]) for r in rows] == [
        ("spawn", "allowed", "otto"),
        ("cancel", "allowed", "otto"),
    ]
    assert str(rows[1]["run_id"]) == run_id and rows[0]["workflow"] == "plain"
    # A refused change leaves no allowed row: the gate's own rule (an approver replies only at
    # a gate) refuses inside the change, which rolls back; the layer audits the reason.
    other = spawn(conn, "plain").run_id
    mark = last_id(conn)
    with pytest.raises(gates.DecisionRefused, match="may reply only while"):
        gates.reply(conn, other, "steer it", APPROVER)
    rows = audit(conn, mark)
    assert [(r["action"], r["outcome"]) for r in rows] == [("reply", "refused")]
    assert "may reply only while the run waits at a gate" in rows[0]["reason"]
    # Threadline's own changes are neither asked nor audited.
    spawn(conn, "plain")
    assert audit(conn, mark)[1:] == []


def test_bots_prices_and_limits_allowed_are_audited_with_their_change(db_url, conn):
    mark = last_id(conn)
    bot_config.apply_bots(conn, bot_config.parse_bots(HELPER_BOT), OPERATOR)
    bot_config.set_price(conn, "m", 2.0, 10.0, OPERATOR)
    assert bot_config.remove_price(conn, "m", OPERATOR)
    run_limits.set_limit(conn, "global", 4, OPERATOR)
    assert run_limits.remove_limit(conn, "global", OPERATOR) == (True, 0)
    # The CLI's door passes its OS account.
    limited = harness.run_cli(db_url, "limits", "set", "initiator:carl", "3")
    assert limited.returncode == 0, limited.stderr
    rows = audit(conn, mark)
    assert [(r["action"], r["outcome"], r["actor"], r["detail"]) for r in rows[:5]] == [
        ("configure_bots", "allowed", "otto", {"bots": ["helper"]}),
        ("set_price", "allowed", "otto", {"model": "m", "input": 2.0, "output": 10.0}),
        ("set_price", "allowed", "otto", {"model": "m", "removed": True}),
        ("set_limits", "allowed", "otto", {"scope": "global", "max_runs": 4}),
        ("set_limits", "allowed", "otto", {"scope": "global", "removed": True}),
    ]
    assert [(r["action"], r["outcome"], r["door"]) for r in rows[5:]] == [
        ("set_limits", "allowed", "cli")
    ]
    assert [b["name"] for b in bot_config.list_bots(conn)] == ["helper"]
    assert [lim["scope"] for lim in run_limits.list_limits(conn)] == ["initiator:carl"]


def test_console_passwords_are_an_admins_to_set_and_audited(db_url, conn):
    """A console password hands out console roles: setting one is an admin's action."""
    add_user(conn, "ann", "pw", ["viewer"])  # set up, through no door
    kept, mark = list_users(conn), last_id(conn)
    not_admin = Actor("nobody", "cli")  # an OS account that is not the install's admin
    for who in (OPERATOR, not_admin):
        with pytest.raises(Refused, match="admin action"):
            add_user(conn, "mallory", "pw", ["operator", "approver"], who)
    assert list_users(conn) == kept
    rows = audit(conn, mark)
    assert [(r["action"], r["outcome"], r["door"], r["actor"]) for r in rows] == [
        ("manage_accounts", "refused", "console", "otto"),
        ("manage_accounts", "refused", "cli", "nobody"),
    ]
    assert rows[0]["reason"] == authorization.ADMIN_REASON
    # The admin may, through the CLI's door, and is audited with the change.
    mark = last_id(conn)
    added = harness.run_cli(
        db_url, "console", "user", "add", "bob", "--role", "operator",
        "--password-stdin", stdin="battery staple\n",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert [u["account"] for u in list_users(conn)] == ["ann", "bob"]
    rows = audit(conn, mark)
    assert [(r["action"], r["outcome"], r["door"]) for r in rows] == [
        ("manage_accounts", "allowed", "cli")
    ]
    assert rows[0]["detail"] == {"console_user": "bob", "roles": ["operator"]}


# -- the API: a token's roles, before the body is read --------------------------------------------
def test_the_api_refuses_each_write_a_token_lacks_the_role_for_and_audits_it(
    db_url,
    conn,
    apply,
    api,  # noqa: F811 (the fixture)
):
    from console.api import ROUTES

    apply(RECIPE)
    viewer = token(db_url, "dash", "viewer")
    operator = token(db_url, "ci", "operator")
    before, after = conn.execute(STATE).fetchone(), last_id(conn)
    writes = [r for r in ROUTES if r.action is not None]
    assert {r.method for r in writes} == {"POST"}
    params = {"run_id": str(uuid.uuid4()), "slug": "plain", "proposal_id": "1"}
    for route in writes:
        status, answer, _ = call(api, "POST", route.path.format(**params), viewer, {})
        assert status == 403, (route.path, answer)
        assert answer["error"].startswith("dash (viewer), via a token minted by"), answer
    assert conn.execute(STATE).fetchone() == before
    rows = audit(conn, after)
    assert [(r["action"], r["outcome"], r["door"], r["actor"]) for r in rows] == [
        (str(r.action), "refused", "api", "dash") for r in writes
    ]
    assert all(r["account_id"] is not None and "needs the" in r["reason"] for r in rows)

    mark = last_id(conn)
    status, started, _ = call(api, "POST", "/runs", operator, {"workflow": "plain"})
    assert status == 200, started
    rows = audit(conn, mark)
    assert [(r["action"], r["outcome"], r["door"], r["actor"]) for r in rows] == [
        ("spawn", "allowed", "api", "ci")
    ]


# -- the CLI: an OS account that is not the install's admin ------------------------------------
def test_the_cli_refuses_admin_actions_to_a_non_admin_and_audits_them(
    db_url, conn, logins, tmp_path
):
    assert harness.run_cli(db_url, "user", "add", "alice").returncode == 0
    home = tmp_path / "home"
    home.mkdir()
    before, after = conn.execute(STATE).fetchone(), last_id(conn)
    for args in (("token", "create", "alice", "--role", "viewer"), ("user", "add", "mallory")):
        refused = cli_as_nobody(logins["console"], home, *args)
        assert refused.returncode == 2, refused.stderr
        assert "nobody may not" in refused.stderr and "admin action" in refused.stderr
    assert conn.execute(STATE).fetchone() == before
    rows = audit(conn, after)
    assert [(r["action"], r["outcome"], r["door"], r["actor"]) for r in rows] == [
        ("mint_token", "refused", "cli", "nobody"),
        ("manage_accounts", "refused", "cli", "nobody"),
    ]
    assert rows[0]["detail"]["account"] == "alice"
    # The admin may, and is audited.
    mark = last_id(conn)
    assert harness.run_cli(db_url, "user", "add", "mallory").returncode == 0
    rows = audit(conn, mark)
    assert [(r["action"], r["outcome"], r["door"]) for r in rows] == [
        ("manage_accounts", "allowed", "cli")
    ]


def test_the_ingress_and_the_viewer_cannot_write_the_audit(conn, logins):
    import psycopg

    for kind in ("hooks", "viewer", "bots", "conductor"):
        with psycopg.connect(logins[kind], autocommit=True) as other:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                authorization.record(other, OPERATOR, Action.SPAWN, "allowed")
