"""engine_adapter/store/schema.sql is what the migrations make: regenerated from the migrated
template and compared, so a migration cannot change the schema without the file saying so."""

from __future__ import annotations

import difflib

import pytest

from engine_adapter.store import current_schema


def test_schema_file_is_what_the_migrations_make(template_url: str) -> None:
    major = current_schema.server_major(template_url)
    if f"PostgreSQL {major}." not in current_schema.checked_in().splitlines()[2]:
        pytest.skip(f"schema.sql was dumped from another PostgreSQL major version than {major}")
    fresh = current_schema.dump(template_url)
    diff = "".join(
        difflib.unified_diff(
            current_schema.checked_in().splitlines(keepends=True),
            fresh.splitlines(keepends=True),
            "schema.sql (checked in)",
            "after the migrations",
            n=1,
        )
    )
    assert not diff, f"run `{current_schema.REGENERATE}`:\n{diff[:4000]}"
