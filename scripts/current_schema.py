"""Write engine_adapter/store/schema.sql: the schema a fresh database has after every
migration, dumped from a throwaway embedded server.

    .venv/bin/python scripts/current_schema.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine_adapter.store import current_schema, db, schema
from engine_adapter.testing import harness


def main() -> None:
    with harness.throwaway_server(prefix="threadline-schema-") as url:
        with db.connect(url) as conn:
            schema.migrate(conn)
        text = current_schema.dump(url)
    path = current_schema.checked_in_path()
    path.write_text(text)
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


if __name__ == "__main__":
    main()
