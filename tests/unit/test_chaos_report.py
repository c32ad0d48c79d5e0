"""The chaos benchmark's verdict: repeats the thread shows are visible, any beyond them
invisible."""

from __future__ import annotations

from pathlib import Path

from bench.chaos import SLUG, STEP_IDS, recipe_text
from bench.chaos_report import Duplicates, StepTally, classify, count_effects, named_queries
from engine_adapter.recipes.recipes import load_recipe_text


def tally(attempts: int, effects: int, completed: bool = True) -> StepTally:
    return StepTally("r:s:1", attempts_shown=attempts, effects=effects, completed=completed)


def test_one_attempt_one_effect_is_clean():
    assert classify([tally(1, 1)]) == Duplicates(visible=0, invisible=0, missing=0)


def test_a_repeat_with_a_second_attempt_shown_is_visible():
    assert classify([tally(2, 2), tally(3, 2)]) == Duplicates(visible=2, invisible=0, missing=0)


def test_a_repeat_beyond_the_attempts_shown_is_invisible():
    # Two lines, one attempt in the thread: the step ran twice and nobody could tell.
    assert classify([tally(1, 2)]) == Duplicates(visible=0, invisible=1, missing=0)
    assert classify([tally(2, 5)]) == Duplicates(visible=1, invisible=3, missing=0)


def test_a_completed_step_without_its_line_is_missing():
    assert classify([tally(1, 0), tally(2, 0, completed=False)]) == Duplicates(
        visible=0, invisible=0, missing=1
    )


def test_effects_are_counted_per_step_key(tmp_path: Path):
    path = tmp_path / "side-effects"
    assert count_effects(path) == {}
    path.write_text("a:one:1\na:one:1\nb:one:1\n\n")
    assert count_effects(path) == {"a:one:1": 2, "b:one:1": 1}


def test_named_queries_split_blocks(tmp_path: Path):
    path = tmp_path / "q.sql"
    path.write_text("-- first --\n-- why\nselect 1\n\n-- second --\n-- why\nselect 2\n")
    assert named_queries(path) == {"first": "-- why\nselect 1", "second": "-- why\nselect 2"}


def test_the_chaos_recipe_is_valid_and_names_its_workdir(tmp_path: Path):
    recipe = load_recipe_text(recipe_text(tmp_path))
    assert recipe.slug == SLUG and recipe.workdir == str(tmp_path)
    assert [s.id for s in recipe.steps] == list(STEP_IDS)
    assert all("$THREADLINE_STEP_KEY" in s.text for s in recipe.steps)
