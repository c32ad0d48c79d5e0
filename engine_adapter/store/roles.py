"""Least-privilege database roles: one per process kind (migration 008 creates them, without a
login, and their grants). `db migrate` and `up`, as the owner, make a login role per kind and
database ("<database>.<kind>", a member of its kind's role) with a password of its own, and keep
the logins in credentials.json (0600); every other process connects as its kind's login.

Logins are per database because roles are global to a server: two Threadline databases on one
server must not reset each other's passwords."""

from __future__ import annotations

import logging
import secrets
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from engine_adapter.model.settings import read_credentials, write_credentials

log = logging.getLogger("threadline.roles")

# Process kind -> database role. "console" is the people's door: the console and the CLI.
ROLES = {
    "conductor": "threadline_conductor",
    "bots": "threadline_bots",
    "console": "threadline_console",
    "hooks": "threadline_hooks",
    "viewer": "threadline_viewer",
}


def conninfo(url: str) -> dict[str, str]:
    """A URL's parts (user, password, host, ...); parsed from text, each value is a string."""
    return {k: str(v) for k, v in psycopg.conninfo.conninfo_to_dict(url).items()}


def url_with(url: str, **changes: str) -> str:
    """url with some of its parts (user, password, host, port, dbname) replaced, as a URL."""
    info = conninfo(url) | changes
    auth = quote(info.get("user", ""), safe="")
    if info.get("password"):
        auth += ":" + quote(info["password"], safe="")
    host = info.get("host", "127.0.0.1")
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    port = f":{info['port']}" if info.get("port") else ""
    extra = {
        k: v for k, v in info.items() if k not in ("user", "password", "host", "port", "dbname")
    }
    query = (
        "?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in extra.items()) if extra else ""
    )
    return f"postgresql://{auth}@{host}{port}/{quote(info.get('dbname', ''), safe='')}{query}"


def login_name(conn: psycopg.Connection[Any], kind: str) -> str:
    """The login role of a process kind in this database: "<database>.<kind>"."""
    row = conn.execute("select current_database() as db").fetchone()
    assert row is not None  # a select without a from returns one row
    db = row["db"] if isinstance(row, dict) else row[0]
    return f"{db[:40]}.{kind}"


def grant_logins(
    conn: psycopg.Connection[Any], passwords: dict[str, str] | None = None
) -> dict[str, str]:
    """Give every process kind its login in this database, with the password given for it (kept
    across starts) or a new random one. Returns kind -> URL (built from conn's own address).
    Needs the owner (CREATEROLE)."""
    given = passwords or {}
    urls = {}
    with conn.transaction():
        for kind, group in ROLES.items():
            login = login_name(conn, kind)
            password = given.get(kind) or secrets.token_urlsafe(24)
            exists = conn.execute("select 1 from pg_roles where rolname = %s", (login,)).fetchone()
            verb = (
                "alter role {} login password {}" if exists else "create role {} login password {}"
            )
            conn.execute(sql.SQL(verb).format(sql.Identifier(login), sql.Literal(password)))
            conn.execute(
                sql.SQL("grant {} to {}").format(sql.Identifier(group), sql.Identifier(login))
            )
            address = psycopg.conninfo.make_conninfo(
                host=conn.info.host, port=conn.info.port, dbname=conn.info.dbname
            )
            urls[kind] = url_with(address, user=login, password=password)
    return urls


def drop_logins(conn: psycopg.Connection[Any]) -> None:
    """Remove this database's logins (before the database itself is dropped)."""
    for kind in ROLES:
        conn.execute(
            sql.SQL("drop role if exists {}").format(sql.Identifier(login_name(conn, kind)))
        )


def ensure_logins(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The role logins for this database, kept in credentials.json: the stored passwords are
    set again (so a server reset or a new database gets them), missing ones made. Returns
    kind -> URL."""
    creds = read_credentials()
    stored = {}
    for kind, url in creds.get("roles", {}).items():
        info = conninfo(url)
        if kind in ROLES and info.get("user") == login_name(conn, kind) and info.get("password"):
            stored[kind] = info["password"]
    urls = grant_logins(conn, stored)
    if creds.get("roles") != urls:
        write_credentials(creds | {"roles": urls})
    return urls


def is_superuser(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("select rolsuper from pg_roles where rolname = session_user").fetchone()
    return bool(row and (row["rolsuper"] if isinstance(row, dict) else row[0]))


def warn_if_superuser(conn: psycopg.Connection[Any], process: str) -> None:
    """Only `db migrate` should run as the owner: say so when another process does."""
    if is_superuser(conn):
        log.warning(
            "%s connects as a database superuser: give it its role's login instead "
            "(`threadline db url --role %s`)",
            process,
            process,
        )
