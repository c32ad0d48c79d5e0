"""Bearer tokens of the HTTP API: `threadline token create ACCOUNT --role R` prints one once and
keeps only its sha256; a call made with it acts as ACCOUNT (accounts.py) with the token's roles.

A token for one's own account is anyone's to mint; one for another account only an admin's,
and it stays visibly delegated: it acts as "alice, via a token minted by root" in the thread,
the decision audit and every listing.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import psycopg

from engine_adapter.access import accounts
from engine_adapter.access.authorization import Action, change
from engine_adapter.model.errors import Invalid
from engine_adapter.model.identity import ROLES, Actor
from engine_adapter.store import db

PREFIX = "tl_api_"


class TokenError(Invalid):
    """A token that cannot be created or revoked as asked; nothing was written."""


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(
    conn: psycopg.Connection[Any],
    account: str,
    roles: list[str],
    by: Actor,
    name: str | None = None,
) -> str:
    """A new token acting as account, labelled name (default: the account's name); raises
    TokenError naming the problem (a label in use, a role that does not exist, no such
    account, another's account without being an admin)."""
    name = account if name is None else name
    if not name.strip() or name != name.strip() or len(name) > 100:
        raise TokenError(f"token name {name!r}: 1 to 100 characters, no surrounding spaces")
    unknown = sorted(set(roles) - set(ROLES))
    if not roles or unknown:
        raise TokenError(f"roles {unknown or roles}: each must be one of {', '.join(ROLES)}")
    own = account == by.name and by.on_behalf_of is None and by.minted_by is None
    detail = {"name": name, "roles": sorted(set(roles))}
    token = PREFIX + secrets.token_urlsafe(32)
    try:
        with change(conn, by, Action.MINT_TOKEN, account=account, detail=detail):
            minter = accounts.account_of(conn, by)
            if minter is None:
                raise TokenError(f"{by.name} has no account (it was removed): no token minted")
            target = minter if own else accounts.live(conn, account)
            if target is None:
                raise TokenError(
                    f"no account named {account!r}: add it first (`threadline user add {account}`)"
                )
            conn.execute(
                db.q("insert_api_token"),
                dict(
                    token_hash=_hash(token),
                    name=name,
                    roles=sorted(set(roles)),
                    created_by=by.label,
                    account_id=target,
                    minted_by=minter,
                ),
            )
    except psycopg.errors.UniqueViolation:
        raise TokenError(
            f"a token named {name!r} exists; revoke it first (`threadline token revoke {name}`) "
            "or name this one (--name)"
        ) from None
    except psycopg.errors.InsufficientPrivilege:  # the console's role: one's own only (032)
        raise TokenError(
            f"minting a token for account {account} needs the database owner's login "
            "(`threadline token create` takes it from the credentials; THREADLINE_DATABASE_URL "
            "names another login)"
        ) from None
    return token


def authenticate(conn: psycopg.Connection[Any], token: str) -> Actor | None:
    """The account a bearer token acts as; None for an unknown or revoked one, or one whose
    account was removed."""
    if not token.startswith(PREFIX):
        return None
    row = db.fetch_one(conn, "api_token_account", dict(token=token))
    if row is None:
        return None
    delegated = row["minter_id"] != row["account_id"]
    return Actor(
        row["name"],
        "api",
        roles=frozenset(row["roles"]),
        account_id=int(row["account_id"]),
        minted_by=row["minted_by"] if delegated else None,
        credential=token,
    )


def list_tokens(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return db.fetch_all(conn, "list_api_tokens")


def revoke(conn: psycopg.Connection[Any], name: str, by: Actor) -> None:
    """Revoke a live token: one's own account's, or any (an admin)."""
    row = db.fetch_one(conn, "live_api_token", dict(name=name))
    if row is None:
        raise TokenError(f"no live token named {name!r} (see `threadline token list`)")
    with change(conn, by, Action.REVOKE_TOKEN, account=row["account"], detail={"name": name}):
        db.fetch_one(conn, "revoke_api_token", dict(name=name))
