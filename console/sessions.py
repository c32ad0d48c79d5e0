"""Console sessions, kept on the server: a session cookie carries only a random session id
(signed), and the session is its row in threadline.console_sessions, which keeps only the id's
SHA-256 (migration 045). Signing out closes the row, so the old cookie loads no page and opens no
live connection again; sessions survive a restart of the console and expire after SESSION_DAYS.

In the database, not a file of the home: the database resolves a session id to its person and
roles itself (threadline.authenticate), so the console's login changes nothing but for a person
who is signed in, in that person's name. A session opens only for a proof the database checks
itself (migration 049): a sign-in link's token (tokens.py), an account's password (users.py), or,
with sign-in off, nothing, for the one account the install's owner named (`allow_no_auth`). The
roles come from the database's rows, never from the console.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import psycopg

from engine_adapter.model.errors import Refused
from engine_adapter.store import db

from . import data

SESSION_DAYS = 7


class SignInRefused(Refused):
    """The database refused the proof (a wrong, used, expired or foreign one); nothing changed."""


@dataclass(frozen=True)
class Record:
    user: str
    via: str  # "token" (a sign-in link), "password" or "no-auth"
    roles: frozenset[str]


def open_session(
    via: str,
    secret: str | None = None,
    account: str | None = None,
    days: int = SESSION_DAYS,
) -> tuple[str, Record]:
    """A new session for the proof: a link's token (via "token"), an account and its password
    ("password"), or none ("no-auth"). Returns its id (the caller puts it, signed, in the cookie)
    and whom it signed in; SignInRefused says why not."""
    sid = secrets.token_urlsafe(32)
    params = dict(session=sid, via=via, account=account, secret=secret, days=days)
    try:
        with data.connection() as conn:
            row = db.fetch_row(conn, "open_console_session", params)
    except (psycopg.errors.InvalidPassword, psycopg.errors.InsufficientPrivilege) as err:
        raise SignInRefused(err.diag.message_primary or str(err)) from None
    return sid, Record(row["account"], via, frozenset(row["roles"]))


def allow_no_auth(conn: psycopg.Connection[Any], account: str | None, by: str) -> None:
    """The owner's switch (its own connection): sessions without a proof open for account only;
    None turns sign-in back on and ends the sessions opened without one."""
    if account is None:
        conn.execute(db.q("end_console_no_auth"))
    else:
        conn.execute(db.q("allow_console_no_auth"), dict(account=account, set_by=by))


def find(sid: str) -> Record | None:
    """The live session sid names, or None (signed out, expired, never opened)."""
    with data.connection() as conn:
        row = db.fetch_one(conn, "console_session", dict(session=sid))
    return None if row is None else Record(row["account"], row["via"], frozenset(row["roles"]))


def close(sid: str) -> str | None:
    """End the session sid names; returns whose it was, if it was live."""
    with data.connection() as conn:
        row = db.fetch_one(conn, "close_console_session", dict(session=sid))
    return None if row is None else row["account"]
