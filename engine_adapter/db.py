"""Connections and the named queries of sql/*.sql (one file per area: core, console, triggers)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import dict_row

from .settings import database_url

NOTIFY_CHANNEL = "threadline"
_BLOCK = re.compile(r"^-- (\w+) --\n", re.MULTILINE)


@cache
def queries() -> dict[str, str]:
    """Named SQL blocks: `-- name --`, a comment line, then the query. Names are unique across
    files."""
    found: dict[str, str] = {}
    for file in sorted(
        resources.files("engine_adapter").joinpath("sql").iterdir(), key=lambda f: f.name
    ):
        if not file.name.endswith(".sql"):
            continue
        parts = _BLOCK.split(file.read_text())
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"query {name!r} is defined twice (again in sql/{file.name})")
            found[name] = body.strip()
    return found


def q(name: str) -> str:
    return queries()[name]


def connect(
    url: str | None = None, *, role: str | None = None, autocommit: bool = True
) -> psycopg.Connection[Any]:
    """A connection returning dict rows; autocommit so callers open transactions explicitly.
    Without a url: the login of process role `role` (see settings.database_url)."""
    return psycopg.connect(url or database_url(role), autocommit=autocommit, row_factory=dict_row)


def fetch_one(
    conn: psycopg.Connection[Any], name: str, params: Any = None
) -> dict[str, Any] | None:
    return conn.execute(q(name), params).fetchone()


def fetch_all(conn: psycopg.Connection[Any], name: str, params: Any = None) -> list[dict[str, Any]]:
    return conn.execute(q(name), params).fetchall()


def notify(conn: psycopg.Connection[Any], run_id: str | None, what: str) -> None:
    """Wake conductors, bots and consoles; delivered only when the caller's transaction commits."""
    conn.execute("select pg_notify(%s, %s)", (NOTIFY_CHANNEL, f"{what}:{run_id or ''}"))
