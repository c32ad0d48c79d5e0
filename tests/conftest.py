"""One embedded PostgreSQL per test session; a database per test cloned from a migrated template."""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from engine_adapter import db, harness, schema

TEMPLATE = "tl_template"


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """THREADLINE_TEST_DATABASE_URL (an admin URL) or an embedded server started for this session."""
    given = os.environ.get("THREADLINE_TEST_DATABASE_URL")
    if given:
        yield given
        return
    with harness.throwaway_server(prefix="threadline-test-") as url:
        yield url


@pytest.fixture(scope="session")
def template_url(server_url: str) -> str:
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"drop database if exists {TEMPLATE} with (force)")
        admin.execute(f"create database {TEMPLATE}")
    url = harness.with_dbname(server_url, TEMPLATE)
    with db.connect(url) as conn:
        schema.migrate(conn)
    return url


@contextmanager
def cloned_database(server_url: str, prefix: str = "tl_") -> Iterator[str]:
    """A new database cloned from the migrated template; dropped on the way out."""
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"create database {name} template {TEMPLATE}")
    try:
        yield harness.with_dbname(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f"drop database if exists {name} with (force)")


@pytest.fixture(scope="session")
def clone_database(server_url: str, template_url: str):
    """For fixtures of other scopes: clone_database(prefix) is a context manager yielding a URL."""
    return lambda prefix: cloned_database(server_url, prefix)


@pytest.fixture
def db_url(server_url: str, template_url: str) -> Iterator[str]:
    with cloned_database(server_url) as url:
        yield url


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with db.connect(db_url) as c:
        yield c


@pytest.fixture
def procs(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[harness.ProcessSet]:
    """Conductor and bot processes of one test; all killed at teardown, their logs shown on failure."""
    p = harness.ProcessSet(db_url, tmp_path)
    yield p
    p.kill_all()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(p.log_tails())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def apply(conn: psycopg.Connection):
    """Apply a recipe given as YAML text; returns its slug."""
    from engine_adapter.recipes import load_recipe_text
    from engine_adapter.workflows import apply_recipe

    def _apply(text: str) -> str:
        return apply_recipe(conn, load_recipe_text(text)).slug

    return _apply
