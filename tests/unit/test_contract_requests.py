"""The contract's typed request records (cli/requests.py) say what its published JSON schemas
say: the same fields, the same required ones, the same policy fields."""

from __future__ import annotations

import json
from typing import get_type_hints

import pytest

from engine_adapter.cli.contract import SCHEMAS
from engine_adapter.cli.requests import RECORDS, PolicyRequest


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_request_record_has_its_schemas_fields(name):
    record, published = RECORDS[name], schema(name)
    assert set(get_type_hints(record)) == set(published["properties"]), name
    assert record.__required_keys__ == set(published.get("required", [])), name


def test_the_policy_record_has_the_policy_schemas_fields():
    policy = schema("run")["$defs"]["policy"]
    assert set(get_type_hints(PolicyRequest)) == set(policy["properties"])
    assert PolicyRequest.__required_keys__ == set(policy.get("required", []))
