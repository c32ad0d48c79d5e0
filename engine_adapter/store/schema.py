"""Apply Absurd's pinned schema and Threadline's versioned migrations, idempotently."""

from __future__ import annotations

from importlib import resources
from typing import Any

import absurdctl
import psycopg

from engine_adapter.model.errors import Conflict
from engine_adapter.model.settings import QUEUE
from engine_adapter.store import specialise

ABSURD_VERSION = "0.5.1"
_MIGRATION_LOCK = 7411_0001  # serialises concurrent migrators (several processes may start at once)


class SchemaMismatch(Conflict):
    """The database holds an Absurd schema of another version than the one Threadline pins."""


def migration_files() -> list[tuple[str, str]]:
    folder = resources.files("engine_adapter.store").joinpath("sql/migrations")
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)
    return [(p.name.removesuffix(".sql"), p.read_text()) for p in files]


def migrate(conn: psycopg.Connection[Any]) -> list[str]:
    """Bring the database up to date; returns the names of what was applied now."""
    applied_now: list[str] = []
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute("create schema if not exists threadline")
        conn.execute(
            "create table if not exists threadline.schema_migrations ("
            " id bigserial, name text primary key, applied_at timestamptz not null default now())"
        )
        done = {r["name"] for r in conn.execute("select name from threadline.schema_migrations")}
        absurd_name = f"absurd-{ABSURD_VERSION}"
        if absurd_name not in done:
            _apply_absurd(conn)
            conn.execute(
                "insert into threadline.schema_migrations (name) values (%s)", (absurd_name,)
            )
            applied_now.append(absurd_name)
        for name, sql in migration_files():
            if name not in done:
                conn.execute(sql)
                conn.execute("insert into threadline.schema_migrations (name) values (%s)", (name,))
                applied_now.append(name)
        if SPECIALISED_ENGINE in done and not specialise.current(conn, *_SPECIALISATION):
            specialise.apply(conn, *_SPECIALISATION)  # made again after a change to either
            applied_now.append(SPECIALISED_ENGINE)
    return applied_now


# Absurd's runtime functions, specialised for Threadline's queue (specialise.py).
_SPECIALISATION = (absurdctl.BUNDLED_SCHEMA_SQL, (QUEUE,))
# Recorded by `threadline db migrate --engine specialised`, removed by `--engine plain`.
SPECIALISED_ENGINE = "absurd-specialised-engine"


def set_engine(conn: psycopg.Connection[Any], specialised: bool) -> None:
    """Run Absurd's runtime functions specialised for Threadline's queue from now on (every
    migrate keeps them so), or as Absurd wrote them."""
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "delete from threadline.schema_migrations where name = %s", (SPECIALISED_ENGINE,)
        )
        if specialised:
            specialise.apply(conn, *_SPECIALISATION)
            conn.execute(
                "insert into threadline.schema_migrations (name) values (%s)",
                (SPECIALISED_ENGINE,),
            )
        else:
            specialise.apply(conn, absurdctl.BUNDLED_SCHEMA_SQL, ())


def _apply_absurd(conn: psycopg.Connection[Any]) -> None:
    # The bundled schema is not idempotent: apply it only where no absurd schema exists yet.
    present = conn.execute("select to_regclass('absurd.queues') is not null as present").fetchone()
    assert present is not None  # a select without a from returns one row
    if present["present"]:
        row = conn.execute("select absurd.get_schema_version() as v").fetchone()
        assert row is not None  # a function's value: one row
        version = row["v"]
        if version.lstrip("v") != ABSURD_VERSION:
            raise SchemaMismatch(
                f"database has Absurd schema {version}; Threadline pins {ABSURD_VERSION}"
            )
    else:
        conn.execute(absurdctl.BUNDLED_SCHEMA_SQL)
    exists = conn.execute(
        "select 1 from absurd.list_queues() where queue_name = %s", (QUEUE,)
    ).fetchone()
    if not exists:
        conn.execute("select absurd.create_queue(%s)", (QUEUE,))


def applied_migrations(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return conn.execute(
        "select name, applied_at from threadline.schema_migrations order by id"
    ).fetchall()
