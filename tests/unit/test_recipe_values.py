"""Durations, quoting and the recipe error: what recipes, webhook triggers and events share."""

from __future__ import annotations

import pickle

import pytest

from engine_adapter.model.errors import Invalid
from engine_adapter.model.recipe_values import RecipeError, format_duration, parse_duration, quote


def test_parse_duration() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("500ms") == 0.5
    assert parse_duration("30s") == 30
    assert parse_duration("10m") == 600
    assert parse_duration("2h") == 7200
    assert parse_duration("1d") == 86400
    assert parse_duration("45") == 45
    assert parse_duration(" 90 ") == 90
    assert parse_duration(12) == 12.0
    for bad in ("10x", "", "h", "1h 30m", "-5", "1.5", True):
        with pytest.raises(ValueError):
            parse_duration(bad)  # type: ignore[arg-type]


def test_format_duration_inverts_parse() -> None:
    for text in ("1h30m", "500ms", "30s", "1d2h3m4s5ms", "0s"):
        assert format_duration(parse_duration(text)) == text
    assert format_duration(5400) == "1h30m"


def test_recipe_error_str_joins_lines() -> None:
    err = RecipeError(["a: one", "b: two"])
    assert isinstance(err, Invalid)  # bad input: the doors answer 400/422, exit 2, exit 10
    assert str(err) == "a: one\nb: two"


def test_quote_cuts_long_values() -> None:
    assert quote("x") == '"x"'
    assert quote([1, None]) == "[1, null]"
    long = quote("y" * 500)
    assert len(long) == 120 and long.endswith("...")


def test_recipe_error_crosses_processes() -> None:
    err = pickle.loads(pickle.dumps(RecipeError(["a: one"], "r.yaml")))
    assert (err.errors, err.source) == (["a: one"], "r.yaml")
