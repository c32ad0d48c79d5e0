"""Bearer tokens of the HTTP API: created by `threadline token create NAME --role R`, shown
once, kept only as a sha256; a call made with one acts as NAME with the token's roles."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import psycopg

from . import db
from .identity import ROLES, Actor

PREFIX = "tl_api_"


class TokenError(ValueError):
    """A token that cannot be created or revoked as asked; nothing was written."""


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(conn: psycopg.Connection[Any], name: str, roles: list[str], created_by: str) -> str:
    """A new token for NAME; raises TokenError naming the problem (a name already used, a role
    that does not exist)."""
    if not name.strip() or name != name.strip() or len(name) > 100:
        raise TokenError(f"token name {name!r}: 1 to 100 characters, no surrounding spaces")
    unknown = sorted(set(roles) - set(ROLES))
    if not roles or unknown:
        raise TokenError(f"roles {unknown or roles}: each must be one of {', '.join(ROLES)}")
    token = PREFIX + secrets.token_urlsafe(32)
    try:
        with conn.transaction():
            conn.execute(
                db.q("insert_api_token"),
                dict(
                    token_hash=_hash(token),
                    name=name,
                    roles=sorted(set(roles)),
                    created_by=created_by,
                ),
            )
    except psycopg.errors.UniqueViolation:
        raise TokenError(
            f"a token named {name!r} exists; revoke it first (`threadline token revoke {name}`)"
        ) from None
    return token


def authenticate(conn: psycopg.Connection[Any], token: str) -> Actor | None:
    """The identity a bearer token acts as; None for an unknown or revoked one."""
    if not token.startswith(PREFIX):
        return None
    row = db.fetch_one(conn, "api_token_by_hash", dict(token_hash=_hash(token)))
    return None if row is None else Actor(row["name"], "api", roles=frozenset(row["roles"]))


def list_tokens(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return db.fetch_all(conn, "list_api_tokens")


def revoke(conn: psycopg.Connection[Any], name: str) -> None:
    with conn.transaction():
        if db.fetch_one(conn, "revoke_api_token", dict(name=name)) is None:
            raise TokenError(f"no live token named {name!r} (see `threadline token list`)")
