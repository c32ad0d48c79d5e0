"""A fresh, migrated database for one benchmark session, on a given server or a private
embedded one; everything it creates is removed again on the way out, also after an error."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

import psycopg

from engine_adapter.store import db, schema
from engine_adapter.testing.harness import throwaway_server, with_dbname


def embedded_server() -> AbstractContextManager[str]:
    """Start a throwaway embedded Postgres in a temp home; yield its (admin) URL."""
    return throwaway_server(prefix="threadline-bench-pg-")


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


def add_database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        help="a server URL allowed to create databases (default: a private embedded Postgres)",
    )


@contextmanager
def session(server_url: str | None, prefix: str) -> Iterator[tuple[str, Path]]:
    """(a fresh database's URL, a temp home for its processes) on server_url, or on a private
    embedded server; all of it removed on the way out."""
    with ExitStack() as stack:
        server_url = server_url or stack.enter_context(embedded_server())
        url = stack.enter_context(fresh_database(server_url))
        home = Path(tempfile.mkdtemp(prefix=prefix))
        stack.callback(shutil.rmtree, home, ignore_errors=True)
        yield url, home
