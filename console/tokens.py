"""One-time sign-in links, as Jupyter prints them: `threadline up` and `threadline console link`
mint a token for the OS account running them, with every role; opening the link trades it for a
session (sessions.py).

Only a SHA-256 of each token is kept, in threadline.console_links (migration 049), written only
by the database's owner (the commands above connect as it): the console's login can neither add
a link nor read one, and a link is used (once, unexpired) only by the database's own check when a
session opens.
"""

from __future__ import annotations

import secrets
from typing import Any

import psycopg

from engine_adapter.model.identity import ROLES
from engine_adapter.store import db

TTL_S = 3600  # a link printed by `up` works for an hour; `threadline console link` makes another


def mint(
    conn: psycopg.Connection[Any],
    user: str,
    ttl_s: float = TTL_S,
    roles: tuple[str, ...] = ROLES,
    by: str | None = None,
) -> str:
    """A new one-time token for user (the owner's connection); the caller shows it once, only its
    hash is kept."""
    token = secrets.token_urlsafe(32)
    params = dict(
        token=token, account=user, roles=sorted(roles), minted_by=by or user, ttl_s=float(ttl_s)
    )
    conn.execute(db.q("mint_console_link"), params)
    return token


def link(token: str, port: int, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{port}/?token={token}"
