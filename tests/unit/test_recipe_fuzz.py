"""Property: no input makes recipe validation raise anything but RecipeError, and what validates
has a canonical form that stores (JSON, UTF-8) and validates again (as a run's snapshot must)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe_strategies import RECIPE_TEXT, mutated_recipes

from engine_adapter.recipes.recipes import Recipe, RecipeError, load_recipe_text

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_round_trip(recipe: Recipe) -> None:
    doc = recipe.to_dict()
    blob = json.dumps(doc, ensure_ascii=False, allow_nan=False)
    blob.encode("utf-8")
    assert recipe.canonical_hash
    again = Recipe.from_dict(json.loads(blob))
    assert again.canonical_hash == recipe.canonical_hash


@FUZZ
@given(RECIPE_TEXT)
def test_text_validates_or_is_refused(text):
    try:
        recipe = load_recipe_text(text)
    except RecipeError as err:
        assert err.errors and all(isinstance(e, str) and e for e in err.errors)
        return
    check_round_trip(recipe)


@FUZZ
@given(mutated_recipes())
def test_documents_validate_or_are_refused(doc):
    try:
        recipe = Recipe.from_dict(doc)
    except RecipeError as err:
        assert err.errors
        return
    check_round_trip(recipe)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 12), st.integers(2, 12))
def test_alias_expansion_is_bounded_at_any_shape(levels, width):
    doc = "a: &a [x]\n" + "".join(
        f"l{i}: &l{i} [" + ",".join([f"*{'a' if i == 0 else f'l{i - 1}'}"] * width) + "]\n"
        for i in range(levels)
    )
    try:
        load_recipe_text(doc + "slug: x\nsteps:\n  - {id: a, sleep: 1s}\n")
    except RecipeError as err:
        assert (
            "more than 20000 values" in str(err)
            or "nested deeper" in str(err)
            or "unknown field" in str(err)
        )
