"""Fixtures for Absurd's own Python SDK tests, which scripts/absurd_sdk_tests.sh copies here
from a checkout of Absurd's repository (git ignores them: they are never committed here), in
place of upstream's conftest.py, which starts a Postgres container and applies Absurd's schema.

Here each test gets a database cloned from Threadline's migrated template (tests/conftest.py),
and the engine's runtime functions in it are specialised (store/specialise.py) for Threadline's
queue and for the queues these tests make (`queue_name` hands out SPECIALISED in turn), so the
SDK's tests exercise the static statements Threadline runs, as well as the dynamic ones any
other queue runs. `conn` and `queue_name` otherwise behave as upstream's."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from uuid import uuid4

import absurd_sdk
import absurdctl
import psycopg
import pytest

from engine_adapter.model.settings import QUEUE
from engine_adapter.store import specialise

SPECIALISED = tuple(f"sdk_q{n}" for n in range(1, 5))


@pytest.fixture
def db_dsn(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as c:
        specialise.apply(c, absurdctl.BUNDLED_SCHEMA_SQL, (QUEUE, *SPECIALISED))
    return db_url


@pytest.fixture
def conn(db_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_dsn, autocommit=True) as connection:
        connection.execute("set timezone to 'UTC'")
        original_get_current_time = absurd_sdk._get_current_time

        def patched_get_current_time() -> datetime:  # the tests move time with absurd.fake_now
            result = connection.execute(
                "SELECT current_setting('absurd.fake_now', true)"
            ).fetchone()
            fake_now = result[0] if result else None
            if fake_now and fake_now.strip():
                return datetime.fromisoformat(fake_now)
            return original_get_current_time()

        monkeypatch.setattr(absurd_sdk, "_get_current_time", patched_get_current_time)
        try:
            yield connection
        finally:
            connection.execute("set absurd.fake_now = default")


@pytest.fixture
def queue_name():
    names = iter(SPECIALISED)

    def factory(prefix: str = "sdk") -> str:
        return next(names, None) or f"{prefix}_{uuid4().hex[:8]}"

    return factory
