"""The console's own database login, used as an attacker holding its password (or running as the
console process) would (issue 22): it changes state only for a person who presents a live
credential, in that person's name, within that person's roles, as the rules of authorization.py
say (migration 045). Every refused attempt changes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from console import access, data, sessions
from engine_adapter.access import authorization
from engine_adapter.model import names
from engine_adapter.model.settings import QUEUE
from engine_adapter.runs import commands, gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness
from tests.integration.test_api import token
from tests.security.test_db_logins import counts, refused

GATE = """
slug: gate
steps:
  - id: ask
    human_gate: "Ship it?"
    approvers: [alice]
"""


@pytest.fixture
def waiting(conn, apply, procs) -> tuple[str, str]:
    """A run waiting at a gate only alice may decide; (run id, the gate's step key)."""
    apply(GATE)
    procs.start("conductor")
    run_id = spawn(conn, "gate").run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    return run_id, names.step_key(run_id, "ask", 1)


def authenticate(c: psycopg.Connection, credential: str | None, action: str) -> dict[str, Any]:
    return db.fetch_row(
        c, "authenticate", dict(credential=credential, action=action, account=None)
    )["actor"]


def decision(
    run_id: str, key: str, actor: str, via: str = "api", minted_by: str | None = None
) -> dict[str, Any]:
    return dict(
        step_key=key,
        run_id=run_id,
        decision="approve",
        actor=actor,
        via=via,
        on_behalf_of=None,
        reason=None,
        account_id=None,
        minted_by=minted_by,
    )


def test_the_database_holds_the_rules_of_authorization_py(conn):
    held = {r["action"]: r for r in db.fetch_all(conn, "action_rules")}
    assert held == {
        str(action): dict(
            action=str(action),
            verb=rule.verb,
            roles=list(rule.roles),
            admin=rule.admin,
            admin_for_others=rule.admin_for_others,
        )
        for action, rule in authorization.RULES.items()
    }


# Every table the console's login wrote before migration 045 that it writes no more.
NO_LONGER_WRITTEN = (
    "insert into threadline.accounts (name, created_by) values ('mallory', 'x')",
    "update threadline.accounts set removed_at = now()",
    "insert into threadline.account_channels (account_id, channel, target, added_by)"
    " select id, 'webhook', 'http://evil.example', 'x' from threadline.accounts limit 1",
    "delete from threadline.account_channels",
    "update threadline.api_tokens set revoked_at = now()",
    "update threadline.api_tokens set last_used_at = now()",
    "select nextval('threadline.run_queue_seq')",
    "select nextval('threadline.worker_lock_keys')",
    "insert into threadline.bots (name, base_url, model) values ('evil', 'x', 'y')",
    "update threadline.bots set model = 'evil'",
    "delete from threadline.bots",
    "insert into threadline.model_prices (model, input_per_mtok, output_per_mtok)"
    " values ('evil', 0, 0)",
    "delete from threadline.model_prices",
    "insert into threadline.run_limits (kind, max_runs, set_by) values ('global', 1, 'x')",
    "delete from threadline.run_limits",
    "insert into threadline.pause (paused_by, via) values ('x', 'cli')",
    "delete from threadline.pause",
    "update threadline.retention_defaults set runs_s = 3600",
    "insert into threadline.cleanups (by_worker) values ('x')",
    "insert into threadline.resume_tokens (token_hash, run_id, gate_key, subject, expires_at)"
    " select 'x', run_id, 'k', 'mallory', now() + interval '1 day' from threadline.run_threads",
    "insert into threadline.console_sessions (session_hash, account, roles, via, expires_at)"
    " values ('x', 'mallory', '{operator}', 'token', now() + interval '1 day')",
    "update threadline.console_sessions set expires_at = now() + interval '30 days'",
    "insert into threadline.action_rules values ('decide', 'x', '{}', false, false)",
    "update threadline.action_rules set roles = '{}'",
    "insert into threadline.acting values (pg_current_xact_id(), 'decide', '{}')",
    "update absurd.t_threadline set state = 'cancelled'",
    "update absurd.r_threadline set state = 'cancelled'",
    "delete from absurd.w_threadline",
    "delete from absurd.t_threadline",
    "select absurd.cancel_task('threadline', run_id) from threadline.run_threads",
    "select absurd.retry_task('threadline', run_id, '{}') from threadline.run_threads",
)


def test_the_console_login_writes_none_of_the_tables_only_commands_write(conn, logins, waiting):
    before = counts(conn)
    with db.connect(logins["console"]) as c:
        for statement in NO_LONGER_WRITTEN:
            assert "permission denied" in refused(c, statement), statement
    assert counts(conn) == before


def test_without_a_credential_the_console_login_changes_nothing(conn, logins, waiting):
    run_id, key = waiting
    before = counts(conn)
    with db.connect(logins["console"]) as c:
        attempts: list[tuple[str, dict[str, Any]]] = [
            ("insert_decision", decision(run_id, key, "alice")),
            ("lock_run", dict(run_id=run_id)),
            ("cancel_engine_task", dict(queue=QUEUE, run_id=run_id)),
            ("retry_engine_task", dict(queue=QUEUE, run_id=run_id)),
            (
                "emit_retry",
                dict(queue=QUEUE, run_id=run_id, step_key=key, payload=Jsonb({"actor": "x"})),
            ),
        ]
        for name, params in attempts:
            assert "needs a signed-in person's credential" in refused(c, db.q(name), params)
        entry = (
            "select threadline.append_entry(%s, 'human', 'alice', 'message', null, null,"
            " 'approve', '{}')"
        )
        assert "credential" in refused(c, entry, (run_id,))
        audit = dict(
            actor="alice",
            account_id=None,
            label="alice",
            door="console",
            action="decide",
            run_id=run_id,
            workflow=None,
            detail=None,
            outcome="allowed",
            reason=None,
        )
        assert "credential" in refused(c, db.q("insert_authorization_audit"), audit)
        for missing in (None, ""):
            assert "no credential" in refused(
                c, db.q("authenticate"), dict(credential=missing, action="decide", account=None)
            )
    assert counts(conn) == before


def test_a_forged_expired_signed_out_or_revoked_credential_is_refused(
    conn, db_url, logins, waiting
):
    run_id, key = waiting
    alice = token(db_url, "alice", "approver")
    gone = token(db_url, "gone", "approver")
    assert harness.run_cli(db_url, "token", "revoke", "gone").returncode == 0
    before = counts(conn)
    with db.connect(logins["console"]) as c:
        expired, signed_out = "e" * 43, "s" * 43
        for sid in (expired, signed_out):
            c.execute(
                db.q("open_console_session"),
                dict(session=sid, account="alice", roles=["approver"], via="token", days=1),
            )
        conn.execute(
            "update threadline.console_sessions set expires_at = now() - interval '1 second'"
            " where session_hash = threadline.sha256_hex(%s)",
            (expired,),
        )
        assert db.fetch_one(c, "close_console_session", dict(session=signed_out))["account"]
        for credential in (alice + "x", "tl_api_forged", "f" * 43, expired, signed_out, gone):
            with c.transaction():
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="unknown, expired"):
                    with c.transaction():
                        authenticate(c, credential, "decide")
                # ... and the refused credential left no actor to write as.
                assert "credential" in refused(
                    c, db.q("insert_decision"), decision(run_id, key, "alice")
                )
    assert counts(conn) == before


def test_a_viewer_credential_does_no_operator_or_approver_action(conn, db_url, logins, waiting):
    run_id, _key = waiting
    vic = token(db_url, "vic", "viewer")
    before = counts(conn)
    with db.connect(logins["console"]) as c:
        for action in ("cancel", "spawn", "retry", "reply", "decide", "apply_recipe"):
            message = refused(
                c, db.q("authenticate"), dict(credential=vic, action=action, account=None)
            )
            assert message.startswith("vic (viewer), via a token minted by root may not"), message
            assert "needs the" in message and "role" in message, message
        # Allowed to read (no action), it still writes nothing as anyone.
        assert "credential" in refused(c, db.q("lock_run"), dict(run_id=run_id))
    assert counts(conn) == before


def test_an_approver_decides_only_a_gate_it_approves_and_only_as_itself(
    conn, db_url, logins, waiting
):
    run_id, key = waiting
    bob, alice = token(db_url, "bob", "approver"), token(db_url, "alice", "approver")
    before = counts(conn)
    with db.connect(logins["console"]) as c:
        with c.transaction():
            minter = authenticate(c, bob, "decide")["minted_by"]  # the CLI's admin minted it
            message = refused(
                c, db.q("insert_decision"), decision(run_id, key, "bob", "api", minter)
            )
            assert "bob is not one of its approvers" in message
            message = refused(
                c, db.q("insert_decision"), decision(run_id, key, "alice", "api", minter)
            )
            assert "only as the person who signed in" in message
            entry = (
                "select threadline.append_entry(%s, 'human', 'alice', 'decision', %s, null,"
                " 'approved', '{}')"
            )
            assert "only in the name of the person" in refused(c, entry, (run_id, key))
        with c.transaction():  # alice, though, may: the door still works (rolled back)
            minter = authenticate(c, alice, "decide")["minted_by"]
            assert db.fetch_one(c, "insert_decision", decision(run_id, key, "alice", "api", minter))
            raise_rollback()
    assert counts(conn) == before
    assert conn.execute(
        "select count(*) as n from threadline.decisions where step_key = %s", (key,)
    ).fetchone() == {"n": 0}


def raise_rollback() -> None:
    raise psycopg.Rollback()


def test_a_console_session_acts_through_the_console_login_in_its_own_name(
    conn, db_url, logins, waiting
):
    """The console's own path: a session opened at sign-in is the credential its writes present
    (a decision, a run started and cancelled); a signed-out one changes nothing more."""
    run_id, key = waiting
    data.configure(logins["console"])
    try:
        alice = access.Session("alice", frozenset({"approver"}), "password")
        alice = replace(alice, sid=sessions.open_session("alice", "password", alice.roles))
        otto = access.Session("otto", frozenset({"operator"}), "password")
        otto = replace(otto, sid=sessions.open_session("otto", "password", otto.roles))
        with db.connect(logins["console"]) as c:
            gates.decide(c, run_id, "approve", access.session_actor(alice))
            trigger = {"kind": "manual", "caller": "otto", "via": "console"}
            spawned = spawn(c, "gate", trigger=trigger, actor=access.session_actor(otto))
            harness.wait_for_state(db_url, spawned.run_id, "waiting")
            commands.cancel_run(c, spawned.run_id, access.session_actor(otto))
            assert harness.wait_for_state(db_url, spawned.run_id, "cancelled")
            spawned = spawn(c, "gate", trigger=trigger, actor=access.session_actor(otto))
            harness.wait_for_state(db_url, spawned.run_id, "waiting")
            assert sessions.close(otto.sid) == "otto"
            before = counts(conn)
            with pytest.raises(authorization.Refused, match="signed out"):
                commands.cancel_run(c, spawned.run_id, access.session_actor(otto))
            assert counts(conn) == before
    finally:
        data.configure(None)
    assert conn.execute(
        "select actor, via from threadline.decisions where step_key = %s", (key,)
    ).fetchone() == {"actor": "alice", "via": "console"}
