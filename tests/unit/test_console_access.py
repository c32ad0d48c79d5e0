"""The console's sign-in parts on their own: an earlier version's users file (read only for the
upgrade's advice), the failure limiter, the start-up checks, sessions and the role checks every
write goes through. Links and passwords are checked by the database
(tests/security/test_console_login.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import stat

import pytest
import tornado.web

from console import access, data, sessions, tokens
from console.ratelimit import FailureLimiter
from console.users import (
    USERS_ENV,
    UsersFileError,
    add_user,
    legacy_user,
    load_users,
    upgrade_advice,
    verify_password,
)
from engine_adapter.access.authorization import Action
from engine_adapter.model.identity import os_user


def old_hash(password: str) -> str:
    """A password as an earlier version's users file kept it (scrypt)."""
    salt = b"0123456789abcdef"
    digest = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1)
    encoded = [base64.b64encode(b).decode() for b in (salt, digest)]
    return "$".join(["scrypt", "16384", "8", "1", *encoded])


def test_an_old_users_file_tells_what_the_admin_runs(tmp_path):
    users = tmp_path / "users.json"
    users.write_text(
        json.dumps(
            {
                "ann": {"password": old_hash("correct horse"), "roles": ["viewer"]},
                "bob": {"password": old_hash("battery"), "roles": ["operator", "approver"]},
            }
        )
    )
    assert verify_password("correct horse", load_users(users)["ann"].password_hash)
    advice = upgrade_advice(users)
    assert advice is not None and "no longer read" in advice
    assert "`threadline console user add ann --role viewer`" in advice
    assert "`threadline console user add bob --role approver --role operator`" in advice
    assert upgrade_advice(tmp_path / "gone.json") is None
    assert legacy_user(users, "ann", "correct horse").roles == {"viewer"}
    assert legacy_user(users, "ann", "wrong") is None  # a guess learns nothing of the file
    assert legacy_user(users, "eve", "correct horse") is None


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"ann": "s3cret"}',
            'the old form .*"roles": \\["operator", "approver"\\].*console user add ann',
        ),
        (
            '{"ann": {"password": "s3cret", "roles": ["viewer"]}}',
            "ann.password: must be a scrypt hash",
        ),
        (
            '{"ann": {"password": "scrypt$1$1$1$a$b", "roles": []}}',
            "ann.roles: must be a non-empty list",
        ),
        (
            '{"ann": {"password": "scrypt$1$1$1$a$b", "roles": ["root"]}}',
            r"ann.roles: unknown \['root'\]",
        ),
        ('["ann"]', "must hold a JSON object of users"),
        ("{nope", "not valid JSON"),
    ],
)
def test_a_bad_users_file_is_refused_naming_the_problem(tmp_path, text, message):
    users = tmp_path / "users.json"
    users.write_text(text)
    with pytest.raises(UsersFileError, match=message):
        load_users(users)


def test_five_failures_a_minute_lock_a_key_out_for_a_while():
    now = [0.0]
    limiter = FailureLimiter(clock=lambda: now[0], max_failures=5, window_s=60, lockout_s=300)
    for _ in range(4):
        limiter.fail("user:ann", "address:a")
        now[0] += 20  # spread over more than a minute: never 5 within one
    assert limiter.wait_s("user:ann") == 0
    for _ in range(5):
        limiter.fail("user:ann", "address:a")
    assert limiter.wait_s("user:ann") == 300 and limiter.wait_s("address:a") == 300
    assert limiter.wait_s("user:bob", "address:b") == 0
    assert limiter.wait_s("user:bob", "address:a") == 300  # either key locks
    now[0] += 301
    assert limiter.wait_s("user:ann", "address:a") == 0


def test_start_up_checks(tmp_path):
    home = tmp_path / "home"
    with pytest.raises(access.AccessError, match=r"--no-auth: refused on 0\.0\.0\.0"):
        access.configure("0.0.0.0", no_auth=True, env={}, home=home)
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"ann": {"password": old_hash("pw"), "roles": ["viewer"]}}))
    with pytest.raises(access.AccessError, match="THREADLINE_COOKIE_SECRET must be set"):
        access.configure("0.0.0.0", env={}, home=home)
    public = access.configure(
        "0.0.0.0", env={USERS_ENV: str(users), access.SECRET_ENV: "x" * 32}, home=home
    )
    assert public.secret == "x" * 32 and public.old_users_file == users
    local = access.configure("127.0.0.1", env={}, home=home)  # loopback: a secret kept in the home
    secret_file = home / access.SECRET_FILE
    assert (
        local.secret == secret_file.read_text().strip()
        and stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    )
    assert (
        access.configure("localhost", env={}, home=home).secret == local.secret
    )  # the same one, kept
    secret_file.chmod(0o644)
    with pytest.raises(access.AccessError, match="readable by others"):
        access.configure("127.0.0.1", env={}, home=home)


@pytest.fixture
def console_db(logins):
    """The console's parts on a database of their own, as the console's login."""
    data.configure(logins["console"])
    yield logins["console"]
    data.configure(None)


def test_a_session_holds_only_while_its_cookie_and_its_password_do(tmp_path, console_db, conn):
    add_user(conn, "ann", "pw", ["viewer"])
    cfg = access.configure("127.0.0.1", env={access.SECRET_ENV: "s" * 32}, home=tmp_path)
    ann, _ = access.sign_in(cfg, "password", "pw", "ann")
    owner, _ = access.sign_in(cfg, "token", tokens.mint(conn, os_user()))
    assert access.session_from_cookie(cfg, ann) == access.Session(
        "ann", frozenset({"viewer"}), "password"
    )
    assert access.session_from_cookie(cfg, owner).roles == access.ALL_ROLES
    other = access.Access(tmp_path, secret="t" * 32)
    assert access.session_from_cookie(other, ann) is None  # signed with another secret
    bob_claims = base64.b64encode(json.dumps({"user": "bob", "via": "token"}).encode())
    fields = ann.split(b"|")
    forged = b"|".join([*fields[:4], b"%d:%s" % (len(bob_claims), bob_claims), fields[5]])
    assert (
        access.session_from_cookie(cfg, forged) is None
    )  # the claims changed under ann's signature
    with pytest.raises(sessions.SignInRefused, match="invalid user name or password"):
        access.sign_in(cfg, "password", "pw", "bob")  # not a user
    add_user(conn, "ann", "new", ["viewer"])  # a new password ends ann's password sessions
    assert access.session_from_cookie(cfg, ann) is None
    assert access.session_from_cookie(cfg, owner) is not None
    sessions.allow_no_auth(conn, os_user(), "test")  # as `threadline up --no-auth` does
    no_auth = access.configure("127.0.0.1", no_auth=True, env={}, home=tmp_path)
    assert access.session_from_cookie(no_auth, None) == access.Session(
        os_user(), access.ALL_ROLES, "no-auth"
    )


def test_each_write_needs_its_role():
    viewer = access.Session("vic", frozenset({"viewer"}), "password")
    operator = access.Session("otto", frozenset({"operator"}), "password")
    approver = access.Session("abe", frozenset({"approver"}), "password")
    with pytest.raises(
        access.NotAllowed, match=r"vic \(viewer\) may not spawn a run: that needs the operator role"
    ):
        access.actor_of(viewer, Action.SPAWN)
    with pytest.raises(
        access.NotAllowed, match=r"otto .* may not approve a gate: that needs the approver role"
    ):
        access.actor_of(operator, Action.DECIDE, "approve a gate")
    with pytest.raises(access.NotAllowed, match="Not signed in"):
        access.actor_of(None, Action.REPLY)
    actor = access.actor_of(approver, Action.DECIDE)
    assert (actor.name, actor.via, actor.roles) == ("abe", "console", frozenset({"approver"}))
    assert access.actor_of(operator, Action.CANCEL).roles == {"operator"}


def test_a_session_lives_on_the_server_until_signed_out(tmp_path, console_db, conn):
    cfg = access.configure("127.0.0.1", env={access.SECRET_ENV: "s" * 32}, home=tmp_path)
    cookie, _ = access.sign_in(cfg, "token", tokens.mint(conn, "ann"))
    stored = str(conn.execute("select * from threadline.console_sessions").fetchall())
    sid = tornado.web.decode_signed_value(cfg.secret, access.SESSION_COOKIE, cookie).decode()
    assert sid not in stored and "ann" in stored  # only the id's hash is kept
    restarted = access.Access(tmp_path, secret=cfg.secret)  # a new console process, same home
    assert access.session_from_cookie(restarted, cookie).user == "ann"
    assert access.end_session(restarted, cookie) == "ann"
    assert access.session_from_cookie(cfg, cookie) is None  # the signature holds; the session not
    assert access.end_session(cfg, cookie) is None
    late, _ = sessions.open_session("token", tokens.mint(conn, "bob"))
    assert sessions.find(late).user == "bob"
    conn.execute("update threadline.console_sessions set expires_at = now() where account = 'bob'")
    assert sessions.find(late) is None  # expired
