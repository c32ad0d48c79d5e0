"""Console passwords: who may sign in with a password, and with which roles.

Kept in the database (threadline.console_passwords, migration 049), written only by the owner's
login (`threadline console user add`, an admin's action), as a PBKDF2-HMAC-SHA256 verifier that
the database itself checks when a session opens: the console never sees a verifier, and its login
can neither read nor write one, nor choose a signed-in person's roles.

The users file of earlier versions (THREADLINE_CONSOLE_USERS, scrypt hashes, which the database
cannot check) is no longer read for sign-in: the console says, at start and to a person whose
password it still holds, what the admin runs to set each password again (`upgrade_advice`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from engine_adapter.access.authorization import Action, change
from engine_adapter.model.errors import Invalid
from engine_adapter.model.identity import ROLES, Actor
from engine_adapter.store import db

USERS_ENV = "THREADLINE_CONSOLE_USERS"
NAME = r"[A-Za-z0-9_.@-]{1,100}"  # an account's name (threadline.accounts)
NEW_FORM = '{"alice": {"password": "scrypt$…", "roles": ["operator", "approver"]}}'


class UsersFileError(Invalid):
    """The users file cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class User:
    name: str
    roles: frozenset[str]
    password_hash: str


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
        )
    except ValueError:
        return False
    return kind == "scrypt" and hmac.compare_digest(got, expected)


def parse_users(text: str, where: str) -> dict[str, User]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsersFileError(f"{where}: not valid JSON: {err}") from None
    if not isinstance(raw, dict) or not raw:
        raise UsersFileError(f"{where}: must hold a JSON object of users, like {NEW_FORM}")
    users = {}
    for name, entry in raw.items():
        if isinstance(entry, str):
            # The old {"user": "password"} form: plain-text passwords and no roles. Refused rather
            # than guessed: reading it as "all roles" would hand gate decisions to every account.
            raise UsersFileError(
                f"{where}: {name}: the old form (user name → plain password) is no longer read; "
                "users "
                f"now have a password hash and roles, like {NEW_FORM}. Re-create each user with "
                f"`threadline console user add {name} --role operator --role approver`"
            )
        if not isinstance(entry, dict):
            raise UsersFileError(f"{where}: {name}: must be an object like {NEW_FORM}")
        password, roles = entry.get("password"), entry.get("roles")
        if not isinstance(password, str) or not password.startswith("scrypt$"):
            raise UsersFileError(
                f"{where}: {name}.password: must be a scrypt hash (written by "
                f"`threadline console user add {name}`), never the password itself"
            )
        if not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles):
            raise UsersFileError(
                f"{where}: {name}.roles: must be a non-empty list of {', '.join(ROLES)}"
            )
        unknown = sorted(set(roles) - set(ROLES))
        if unknown:
            raise UsersFileError(
                f"{where}: {name}.roles: unknown {unknown}; roles are {', '.join(ROLES)}"
            )
        users[name] = User(name, frozenset(roles), password)
    return users


def load_users(path: Path) -> dict[str, User]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsersFileError(f"{USERS_ENV}: cannot read {path}: {err}") from None
    return parse_users(text, f"{USERS_ENV} {path}")


def add_user(
    conn: psycopg.Connection[Any],
    name: str,
    password: str,
    roles: list[str],
    by: Actor | None = None,
) -> None:
    """Set (or replace) one account's console password and roles, through the owner's connection;
    that account's password sessions end. Console roles are an admin's to hand out, so a
    person's door passes its actor (`by`): the authorization layer decides and audits, in the
    change's transaction."""
    if not re.fullmatch(NAME, name):
        raise Invalid(f"user name {name!r}: letters, digits and _ . @ - only (1 to 100)")
    if not password:
        raise Invalid("password: empty")
    unknown = sorted(set(roles) - set(ROLES))
    if not roles or unknown:
        raise Invalid(f"roles: {unknown or 'none'}; give one or more of {', '.join(ROLES)}")
    detail = {"console_user": name, "roles": sorted(set(roles))}
    params = dict(account=name, password=password, roles=sorted(set(roles)), set_by=_by(by))
    with nullcontext() if by is None else change(conn, by, Action.MANAGE_ACCOUNTS, detail=detail):
        conn.execute(db.q("set_console_password"), params)


def remove_user(conn: psycopg.Connection[Any], name: str, by: Actor | None = None) -> bool:
    """Remove one account's console password (its password sessions end); whether it had one."""
    detail = {"console_user": name, "removed": True}
    with nullcontext() if by is None else change(conn, by, Action.MANAGE_ACCOUNTS, detail=detail):
        return bool(db.fetch_row(conn, "remove_console_password", dict(account=name))["removed"])


def list_users(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """The accounts that sign in by password, with their roles (the owner's connection)."""
    return db.fetch_all(conn, "console_passwords")


def _by(actor: Actor | None) -> str:
    return actor.name if actor is not None else "setup"


def add_command(user: User) -> str:
    roles = " ".join(f"--role {r}" for r in sorted(user.roles))
    return f"threadline console user add {user.name} {roles}"


def upgrade_advice(path: Path) -> str | None:
    """What the admin runs so that the users of an earlier version's users file sign in again
    (None: no such file)."""
    if not path.exists():
        return None
    try:
        users = load_users(path)
    except UsersFileError as err:
        return f"{err}; console passwords are now kept in the database: set each again"
    commands = "; ".join(f"`{add_command(u)}`" for u in users.values())
    return (
        f"{USERS_ENV} ({path}) is no longer read: console passwords are now kept in the "
        f"database. Set each again: {commands}"
    )


def legacy_user(path: Path | None, name: str, password: str) -> User | None:
    """The user of an earlier version's users file whose password this is (it signs in no more;
    the message tells them what the admin runs), else None."""
    if path is None:
        return None
    try:
        user = load_users(path).get(name)
    except UsersFileError:
        return None
    return user if user is not None and verify_password(password, user.password_hash) else None
