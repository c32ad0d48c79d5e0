"""A process starts without the slow imports it rarely needs: the conductor, the bots and the
CLI's parser load neither jsonschema (its format checkers compile grammars at import: seconds on
a busy machine) nor openai (a second or more). They come in where a payload schema is checked, a
contract request is validated or an agent calls its model."""

from __future__ import annotations

import subprocess
import sys

import pytest

SLOW = ("jsonschema", "openai", "pandas", "panel")


@pytest.mark.parametrize(
    "start",
    [
        "import engine_adapter.conductor.conductor",
        "import engine_adapter.bots.bots",
        "from engine_adapter.cli.main import build_parser; build_parser()",
    ],
)
def test_a_process_start_loads_no_slow_module(start):
    probe = f"import sys; {start}; print(sorted(m for m in {SLOW!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_payload_schema_is_still_checked_where_one_is_given():
    from engine_adapter.recipes.payload_schema import check_schema, payload_problems

    errors: list[str] = []
    schema = check_schema({"type": "object", "required": ["n"]}, errors)
    assert errors == [] and schema is not None
    assert payload_problems(schema, {}) == ["payload: 'n' is a required property"]
    check_schema({"type": 7}, errors)
    assert errors and errors[0].startswith("payload_schema.type")
