"""Seed a database with synthetic run history (set-based SQL: 100,000 runs in seconds)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg

SQL = (Path(__file__).parent / "seed_runs.sql").read_text()


def seed_runs(conn: psycopg.Connection[Any], runs: int, claims: int = 20000) -> float:
    """Insert `runs` finished-looking runs spread over 30 days; returns the seconds it took."""
    started = time.perf_counter()
    with conn.transaction(), psycopg.ClientCursor(conn) as cur:  # several statements in one call
        cur.execute(SQL, {"runs": runs, "claims": claims})
    return time.perf_counter() - started
