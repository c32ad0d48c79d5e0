"""The console's database access: one small pool, every statement time-limited.

Pages call the read model and the commands of engine_adapter with a connection from here; no SQL
lives in the console.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from engine_adapter.model.settings import database_url

STATEMENT_TIMEOUT_MS = 5000

_pool: ConnectionPool | None = None
_lock = threading.Lock()
_url: str | None = None


def configure(url: str | None) -> None:
    """Point the console at a database; None means the default. A pool open on another one is
    closed (a test points the console's parts at its own database)."""
    global _url, _pool
    with _lock:
        if _pool is not None and url != _url:
            _pool.close()
            _pool = None
        _url = url


def configured_url() -> str | None:
    return _url


def pool() -> ConnectionPool:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ConnectionPool(
                _url or database_url("console"),
                min_size=1,
                max_size=8,
                open=True,
                name="threadline-console",
                kwargs={
                    "autocommit": True,
                    "row_factory": dict_row,
                    "options": f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
                },
            )
        return _pool


@contextmanager
def connection() -> Iterator[psycopg.Connection[Any]]:
    with pool().connection() as conn:
        yield conn
