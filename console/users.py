"""The console's users file (THREADLINE_CONSOLE_USERS): who may sign in with a password, and with
which roles.

    {"alice": {"password": "scrypt$16384$8$1$<salt>$<hash>", "roles": ["operator", "approver"]}}

Only scrypt hashes are kept (`threadline console user add` writes them). The file is read again on
every check, so a removed user or a changed role takes effect at once, and a file that vanishes or
breaks locks everyone out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from engine_adapter.access.authorization import Action, change
from engine_adapter.model.errors import Invalid
from engine_adapter.model.identity import ROLES, Actor

USERS_ENV = "THREADLINE_CONSOLE_USERS"
# scrypt's recommended interactive cost: ~16 MiB and tens of milliseconds per check.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
NEW_FORM = '{"alice": {"password": "scrypt$…", "roles": ["operator", "approver"]}}'


class UsersFileError(Invalid):
    """The users file cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class User:
    name: str
    roles: frozenset[str]
    password_hash: str


def hash_password(password: str) -> str:
    if not password:
        raise Invalid("password: empty")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    return "$".join(
        [
            "scrypt",
            str(SCRYPT_N),
            str(SCRYPT_R),
            str(SCRYPT_P),
            base64.b64encode(salt).decode(),
            base64.b64encode(digest).decode(),
        ]
    )


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
    path: Path,
    name: str,
    password: str,
    roles: list[str],
    by: tuple[psycopg.Connection[Any], Actor] | None = None,
) -> None:
    """Add or replace one user; the file is rewritten whole (mode 0600) or not at all. The file
    hands out console roles, so a person's door passes its connection and actor (`by`): the
    authorization layer decides (an admin's action) and audits, and the file is written inside
    the audited transaction, so a failed write leaves no allowed row."""
    if not name.strip() or name != name.strip():
        raise Invalid(f"user name {name!r}: must be non-empty, without surrounding spaces")
    existing = load_users(path) if path.exists() else {}
    entry = {"password": hash_password(password), "roles": sorted(set(roles))}
    raw = {
        u.name: {"password": u.password_hash, "roles": sorted(u.roles)} for u in existing.values()
    }
    raw[name] = entry
    parse_users(json.dumps(raw), str(path))  # the roles are checked before anything is written
    detail = {"console_user": name, "roles": entry["roles"], "file": str(path)}
    with nullcontext() if by is None else change(*by, Action.MANAGE_ACCOUNTS, detail=detail):
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(raw, out, indent=2)
            out.write("\n")
        os.replace(tmp, path)
