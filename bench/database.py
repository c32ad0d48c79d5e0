"""A fresh, migrated database for one benchmark session, on a given server or a private
embedded one; everything it creates is removed again on the way out, also after an error."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg

from engine_adapter import db, schema
from engine_adapter.embedded import EmbeddedPostgres


def with_dbname(url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


@contextmanager
def embedded_server() -> Iterator[str]:
    """Start a throwaway embedded Postgres in a temp home; yield its (admin) URL."""
    home = Path(tempfile.mkdtemp(prefix="threadline-bench-pg-"))
    server = EmbeddedPostgres(home)
    # As root the data dir may live under /var/lib/threadline/<hash> (see embedded.py); remember
    # it before home disappears so it can be removed too.
    data_base: Path | None = None
    try:
        server.ensure_initialised()
        data_base = server.data_dir.parent
        yield server.start()
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(home, ignore_errors=True)
            if data_base is not None and not data_base.is_relative_to(home):
                shutil.rmtree(data_base, ignore_errors=True)


@contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """Create tl_bench_<random> on the server, migrate it, yield its URL, drop it afterwards."""
    name = f"tl_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    url = with_dbname(server_url, name)
    try:
        with db.connect(url) as conn:
            schema.migrate(conn)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f"drop database if exists {name} with (force)")
