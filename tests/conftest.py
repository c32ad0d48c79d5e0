"""One embedded PostgreSQL per test session; a database per test cloned from a migrated template."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from engine_adapter.access import authorization
from engine_adapter.sandbox import step_guard
from engine_adapter.store import db, meeting, roles, schema
from engine_adapter.testing import harness

TEMPLATE = "tl_template"


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """THREADLINE_TEST_DATABASE_URL (an admin URL) or an embedded server started for this
    session."""
    given = os.environ.get("THREADLINE_TEST_DATABASE_URL")
    if given:
        yield given
        return
    with harness.throwaway_server(prefix="threadline-test-") as url:
        yield url


@pytest.fixture(scope="session")
def template_logins(server_url: str) -> dict[str, str]:
    """The migrated template, and its process-role logins (kind -> URL of the template). A clone
    keeps the template's grants, so these logins serve every test database."""
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"drop database if exists {TEMPLATE} with (force)")
        admin.execute(f"create database {TEMPLATE}")
    url = harness.with_dbname(server_url, TEMPLATE)
    with db.connect(url) as conn:
        schema.migrate(conn)
        authorization.sync_rules(conn)
        return roles.grant_logins(conn)


@pytest.fixture(scope="session")
def template_url(server_url: str, template_logins: dict[str, str]) -> str:
    return harness.with_dbname(server_url, TEMPLATE)


@pytest.fixture
def logins(db_url: str, template_logins: dict[str, str]) -> dict[str, str]:
    """This test database's process-role logins: kind -> URL."""
    name = psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]
    return {kind: harness.with_dbname(url, name) for kind, url in template_logins.items()}


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
        meeting.forget(harness.with_dbname(server_url, name))  # its processes' sockets


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
def procs(
    db_url: str, logins: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[harness.ProcessSet]:
    """Conductor and bot processes of one test, each connected as its kind's role; all killed at
    teardown, their logs shown on failure. A recipe's absolute workdir may lie in tmp_path/work
    (the `workdir` fixture)."""
    p = harness.ProcessSet(
        db_url, tmp_path, step_dirs=[tmp_path], logins=logins, workdirs=[tmp_path / "work"]
    )
    yield p
    p.kill_all()
    # What the next bots process's start would do: a bots process killed while it started a
    # sandbox can leave that sandbox's init behind (step_guard.end_strays).
    step_guard.clear_leftovers(p.home / "runs")
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(p.log_tails())


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory a recipe may name as its absolute workdir (the procs fixture allows it)."""
    path = tmp_path / "work"
    path.mkdir(mode=0o777)
    path.chmod(0o777)  # steps may run as an unprivileged user
    return path


def pytest_configure(config: pytest.Config) -> None:
    # Commands run by the tests keep their credentials and sign-in tokens in a home of this
    # session's own, never in the account's ~/.threadline.
    home = tempfile.mkdtemp(prefix="threadline-tests-home-")
    os.environ["THREADLINE_HOME"] = home
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))
    # As root, steps run as an unprivileged user and must reach their test's tmp_path: a base
    # directory of this session's own, not pytest's shared /tmp/pytest-of-root, which every
    # pytest session resets to 0700.
    if os.geteuid() == 0 and config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="threadline-tests-")
        config.add_cleanup(lambda: shutil.rmtree(config.option.basetemp, ignore_errors=True))


@pytest.fixture(autouse=True)
def steps_may_write_tmp_path(request: pytest.FixtureRequest) -> None:
    """As root, steps run as an unprivileged user: a test's tmp_path (where its steps leave their
    side effects) must be reachable and writable by it, as THREADLINE_STEP_DIRS would be."""
    if os.geteuid() != 0 or "tmp_path" not in request.fixturenames:
        return
    path: Path = request.getfixturevalue("tmp_path")
    path.chmod(0o777)
    for parent in path.parents:
        if parent == Path(tempfile.gettempdir()) or parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o111)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def apply(conn: psycopg.Connection):
    """Apply a recipe given as YAML text; returns its slug."""
    from engine_adapter.catalog.workflows import apply_recipe
    from engine_adapter.recipes.recipes import load_recipe_text

    def _apply(text: str) -> str:
        return apply_recipe(conn, load_recipe_text(text)).slug

    return _apply
