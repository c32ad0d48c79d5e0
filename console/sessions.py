"""Console sessions, kept on the server: a session cookie carries only a random session id
(signed), and the session is its row in threadline.console_sessions, which keeps only the id's
SHA-256 (migration 045). Signing out closes the row, so the old cookie loads no page and opens no
live connection again; sessions survive a restart of the console and expire after SESSION_DAYS.

In the database, not a file of the home: the database resolves a session id to its person and
roles itself (threadline.authenticate), so the console's login changes nothing but for a person
who is signed in, in that person's name. No process login writes the table: a session opens and
closes only through migration 045's functions.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from engine_adapter.store import db

from . import data

SESSION_DAYS = 7


@dataclass(frozen=True)
class Record:
    user: str
    via: str  # "token" (a sign-in link), "password" (the users file) or "no-auth"
    roles: frozenset[str]


def open_session(user: str, via: str, roles: frozenset[str], days: int = SESSION_DAYS) -> str:
    """A new session for user with roles; returns its id (the caller puts it, signed, in the
    cookie)."""
    sid = secrets.token_urlsafe(32)
    with data.connection() as conn:
        conn.execute(
            db.q("open_console_session"),
            dict(session=sid, account=user, roles=sorted(roles), via=via, days=days),
        )
    return sid


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
