"""The console's own database login, used as an attacker holding its password (or running as the
console process) would (issue 22): it changes state only for a person who presents a live
credential, in that person's name, within that person's roles, as the rules of authorization.py
say (migration 045). It opens a session only for a proof the database checks itself (a sign-in
link's token, once and unexpired, or an account's password), with the roles the database holds
for it (migration 049). Every refused attempt changes nothing.
"""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from console import access, data, sessions, tokens, users
from engine_adapter.access import authorization
from engine_adapter.model import names
from engine_adapter.model.identity import ROLES
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
            link = tokens.mint(conn, "alice", roles=("approver",))
            c.execute(db.q("open_console_session"), proof(sid, "token", link))
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
        users.add_user(conn, "alice", "alice's password", ["approver"])
        users.add_user(conn, "otto", "otto's password", ["operator"])
        sid, record = sessions.open_session("password", "alice's password", "alice")
        alice = access.Session(record.user, record.roles, record.via, sid)
        assert alice.roles == {"approver"}  # the database's roles for alice
        sid, record = sessions.open_session("password", "otto's password", "otto")
        otto = access.Session(record.user, record.roles, record.via, sid)
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


# Opening a session (migration 049): the console's login presents a proof, the database checks it.


def proof(
    session: str,
    via: str,
    secret: str | None = None,
    account: str | None = None,
    days: int = 1,
) -> dict[str, Any]:
    return dict(session=session, via=via, secret=secret, account=account, days=days)


def sign_in_rows(conn: psycopg.Connection) -> dict[str, Any]:
    """Every row a sign-in could write: sessions, links (their use), verifiers, accounts."""
    tables = (
        "threadline.console_sessions",
        "threadline.console_links",
        "threadline.console_passwords",
        "threadline.console_no_auth",
        "threadline.accounts",
    )
    return {t: conn.execute(f"select * from {t} order by 1").fetchall() for t in tables}


def refused_proof(c: psycopg.Connection, params: dict[str, Any]) -> psycopg.Error:
    """The session is not opened: the database refused the proof (its transaction rolled
    back)."""
    with pytest.raises(psycopg.Error) as info, c.transaction():
        c.execute(db.q("open_console_session"), params)
    assert isinstance(
        info.value, psycopg.errors.InvalidPassword | psycopg.errors.InsufficientPrivilege
    ), info.value
    return info.value


def test_the_console_login_opens_no_session_without_a_proof(conn, logins):
    users.add_user(conn, "alice", "alice's password", ["approver"])
    before = sign_in_rows(conn)
    with db.connect(logins["console"]) as c:
        for via, secret, account in [
            ("token", None, "alice"),
            ("token", "", None),
            ("password", None, "alice"),
            ("password", "", "alice"),
            ("no-auth", None, "alice"),  # the owner turned sign-in off for nobody
            ("no-auth", None, None),
        ]:
            err = refused_proof(c, proof("x" * 43, via, secret, account))
            assert (
                "sign-in link is unknown" in str(err)
                or "invalid user name or password" in str(err)
                or "sign-in is on" in str(err)
            ), (via, err)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="via: admin"):
            c.execute(db.q("open_console_session"), proof("x" * 43, "admin", None, "alice"))
    assert sign_in_rows(conn) == before


def test_a_link_opens_one_session_once_and_only_for_its_own_account(conn, logins):
    alice = tokens.mint(conn, "alice", roles=("approver",))
    bob = tokens.mint(conn, "bob", roles=("viewer",))
    assert alice not in str(sign_in_rows(conn))  # only the token's hash is kept
    with db.connect(logins["console"]) as c:
        before = sign_in_rows(conn)
        # Another account's link, claimed for alice: refused, and bob's link is not used up.
        err = refused_proof(c, proof("a" * 43, "token", bob, "alice"))
        assert "signs in bob, not alice" in str(err)
        assert sign_in_rows(conn) == before
        opened = db.fetch_row(c, "open_console_session", proof("b" * 43, "token", alice))
        assert opened == {"account": "alice", "roles": ["approver"]}  # the link's roles
        before = sign_in_rows(conn)
        err = refused_proof(c, proof("c" * 43, "token", alice))  # used
        assert "unknown, used up or expired" in str(err)
        assert sign_in_rows(conn) == before
        # Expired: the owner mints one, time passes; it opens nothing and stays unused.
        late = tokens.mint(conn, "alice", ttl_s=60)
        conn.execute(
            "update threadline.console_links set expires_at = now() - interval '1 second'"
            " where token_hash = threadline.sha256_hex(%s)",
            (late,),
        )
        before = sign_in_rows(conn)
        err = refused_proof(c, proof("d" * 43, "token", late))
        assert "unknown, used up or expired" in str(err)
        assert refused_proof(c, proof("e" * 43, "token", alice + "x"))  # forged
        assert sign_in_rows(conn) == before
        # bob's own link still signs bob in, as a viewer.
        opened = db.fetch_row(c, "open_console_session", proof("f" * 43, "token", bob))
        assert opened == {"account": "bob", "roles": ["viewer"]}


def test_a_password_opens_a_session_only_when_the_database_checks_it(conn, logins):
    users.add_user(conn, "alice", "alice's password", ["approver"])
    verifier = conn.execute("select verifier from threadline.console_passwords").fetchone()
    assert "alice's password" not in verifier["verifier"]
    before = sign_in_rows(conn)
    with db.connect(logins["console"]) as c:
        for account, secret in [
            ("alice", "alice's passwor"),
            ("alice", "ALICE'S PASSWORD"),
            ("bob", "alice's password"),  # no password of bob's
            ("root", "alice's password"),
        ]:
            err = refused_proof(c, proof("p" * 43, "password", secret, account))
            assert "invalid user name or password" in str(err), err
        assert sign_in_rows(conn) == before
        opened = db.fetch_row(
            c, "open_console_session", proof("q" * 43, "password", "alice's password", "alice")
        )
        assert opened == {"account": "alice", "roles": ["approver"]}
        # The session's roles are the database's: alice, an approver only, may not spawn.
        message = refused(
            c,
            db.q("authenticate"),
            dict(credential="q" * 43, action="spawn", account=None),
        )
        assert message.startswith("alice (approver) may not"), message


def test_the_console_login_claims_no_roles_and_reaches_no_proof(conn, logins):
    users.add_user(conn, "alice", "alice's password", ["viewer"])
    tokens.mint(conn, "alice")
    before = sign_in_rows(conn)
    with db.connect(logins["console"]) as c:
        # The old door, which took the account and roles from the caller, is gone.
        with pytest.raises(psycopg.errors.UndefinedFunction), c.transaction():
            c.execute(
                "select threadline.open_console_session(%s, 'root', %s::text[], 'token', 1)",
                ("r" * 43, list(ROLES)),
            )
        for statement in (
            "select * from threadline.console_links",
            "select * from threadline.console_passwords",
            "select * from threadline.console_no_auth",
            "insert into threadline.console_links (token_hash, account, roles, minted_by,"
            " expires_at) values ('x', 'root', '{operator}', 'x', now() + interval '1 day')",
            "update threadline.console_links set used_at = null",
            "update threadline.console_passwords set roles = '{operator,approver}'",
            "insert into threadline.console_no_auth (account, set_by) values ('root', 'x')",
            "select threadline.set_console_password('alice', 'mine', '{operator}', 'x')",
            "select threadline.remove_console_password('alice')",
            "select threadline.password_verifier('mine', 1)",
            "select threadline.password_matches('x', 'y')",
            "select threadline.pbkdf2_sha256('x', 'y', 1)",
        ):
            assert "permission denied" in refused(c, statement), statement
    assert sign_in_rows(conn) == before


def test_without_sign_in_only_the_owners_account_opens_a_session(conn, logins):
    before = sign_in_rows(conn)
    with db.connect(logins["console"]) as c:
        err = refused_proof(c, proof("n" * 43, "no-auth", None, "owner"))
        assert "sign-in is on" in str(err)
        assert sign_in_rows(conn) == before
        sessions.allow_no_auth(conn, "owner", "owner")  # `threadline up --no-auth`, as the owner
        before = sign_in_rows(conn)
        err = refused_proof(c, proof("n" * 43, "no-auth", None, "alice"))
        assert "only for owner, not alice" in str(err)
        assert sign_in_rows(conn) == before
        opened = db.fetch_row(c, "open_console_session", proof("o" * 43, "no-auth"))
        assert opened["account"] == "owner"
        sessions.allow_no_auth(conn, None, "owner")  # sign-in on again: the session ends
        assert db.fetch_one(c, "console_session", dict(session="o" * 43)) is None
        assert "sign-in is on" in str(refused_proof(c, proof("m" * 43, "no-auth")))


def test_a_removed_account_or_password_signs_in_no_more(conn, db_url, logins):
    users.add_user(conn, "alice", "alice's password", ["operator"])
    link = tokens.mint(conn, "alice")
    with db.connect(logins["console"]) as c:
        db.fetch_row(c, "open_console_session", proof("s" * 43, "password", "alice's password",
                                                        "alice"))  # fmt: skip
        assert users.remove_user(conn, "alice")
        assert db.fetch_one(c, "console_session", dict(session="s" * 43)) is None  # ended
        assert "invalid user name" in str(
            refused_proof(c, proof("t" * 43, "password", "alice's password", "alice"))
        )
        assert harness.run_cli(db_url, "user", "remove", "alice").returncode == 0
        before = sign_in_rows(conn)
        assert "was removed" in str(refused_proof(c, proof("u" * 43, "token", link)))
        assert sign_in_rows(conn) == before


@pytest.mark.parametrize(
    "password, salt, iterations",
    [("pw", b"salt" * 4, 1), ("pw", b"\x00" * 16, 2), ("ünï" * 30, b"s" * 16, 1000)],
)
def test_the_verifier_is_pbkdf2_hmac_sha256(conn, password, salt, iterations):
    got = conn.execute(
        "select threadline.pbkdf2_sha256(%s, %s, %s) as key", (password, salt, iterations)
    ).fetchone()["key"]
    assert bytes(got) == hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    verifier = conn.execute(
        "select threadline.password_verifier(%s, %s) as v", (password, iterations)
    ).fetchone()["v"]
    matches = "select threadline.password_matches(%s, %s) as ok"
    assert conn.execute(matches, (password, verifier)).fetchone()["ok"]
    assert not conn.execute(matches, (password + "x", verifier)).fetchone()["ok"]
