"""The current schema, as the migrations leave it: `schema.sql`, beside the migrator.

Migrations say how a database got here; a reader wants to know what is here now. The file is
generated (scripts/current_schema.py) from a freshly migrated database with the embedded
server's own pg_dump, and a test regenerates it and fails when a migration changed the schema
without the file. Privileges are not in it: `sql/grants.txt` is their one home.
"""

from __future__ import annotations

import re
import subprocess
from importlib import resources
from pathlib import Path

from engine_adapter.store.embedded import package_bin_dir

SCHEMA_FILE = "schema.sql"
REGENERATE = ".venv/bin/python scripts/current_schema.py"

# Lines of pg_dump's that say how and when it ran, not what the schema is.
_NOISE = re.compile(r"^(-- Dumped (from|by) |\\(un)?restrict |SET |SELECT pg_catalog\.set_config)")


def server_major(url: str) -> int:
    """The major version pg_dump would talk to: the layout of a dump changes with it."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.info.server_version // 10000


def dump(url: str) -> str:
    """Schema `threadline` of the database at url, without owners, privileges or version noise."""
    out = subprocess.run(
        [
            str(package_bin_dir() / "pg_dump"),
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "--schema=threadline",
            f"--dbname={url}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kept = [line for line in out.splitlines() if not _NOISE.match(line)]
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n")
    header = (
        "-- The current schema `threadline`, generated from a freshly migrated database; do not\n"
        "-- edit it: the migrations in sql/migrations/ are what change it.\n"
        f"-- Regenerate with `{REGENERATE}`. PostgreSQL {server_major(url)}.\n"
    )
    return header + "\n" + body + "\n"


def checked_in() -> str:
    return resources.files("engine_adapter.store").joinpath(SCHEMA_FILE).read_text()


def checked_in_path() -> Path:
    return Path(__file__).with_name(SCHEMA_FILE)
