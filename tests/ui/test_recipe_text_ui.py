"""The console's recipe editor shows a recipe as its author wrote it (comments, key order,
durations), saves what is typed as typed, and its versions' diff compares the texts."""

from __future__ import annotations

from typing import Any

from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.store import db

WRITTEN = """# Kept as typed, comments and all
steps:
  - run_command: echo first   # says first
    id: first
    timeout: 24h
slug: ui-kept-text
name: Kept text
"""
# Typed in the editor: a new comment and a changed duration.
EDITED = WRITTEN.replace("# says first", "# says first, then waits").replace("24h", "36h")


def editor_text(page: Any) -> str:
    """The whole text in the page's code editor, whatever part of it is scrolled into view."""
    return page.locator(".ace_editor").first.evaluate("el => el.env.editor.getValue()")


def test_the_editor_and_versions_show_the_text_as_written(page, stack):
    with db.connect(stack.url) as conn:
        apply_recipe(conn, load_recipe_text(WRITTEN))
    page.goto(stack.base + "/recipe?slug=ui-kept-text")
    page.wait_for_selector("#tl-validation:has-text('Valid · 1 steps')")
    assert editor_text(page) == WRITTEN

    page.locator(".ace_editor").first.evaluate(
        "(el, text) => el.env.editor.setValue(text, 1)", EDITED
    )
    page.wait_for_selector("#tl-validation:has-text('Valid · 1 steps')")
    page.click("button:has-text('Save as new version')")
    page.wait_for_selector("#tl-saved:has-text('ui-kept-text v2')")

    page.goto(stack.base + "/recipe?slug=ui-kept-text")
    page.wait_for_selector("#tl-validation:has-text('Valid · 1 steps')")
    assert editor_text(page) == EDITED
    # The versions card compares v1 with the current version, line by line as written.
    diff = page.locator("pre.tl-text").first
    diff.wait_for()
    shown = diff.inner_text()
    assert "-  - run_command: echo first   # says first\n" in shown
    assert "+  - run_command: echo first   # says first, then waits\n" in shown
    assert "-    timeout: 24h\n+    timeout: 36h" in shown
