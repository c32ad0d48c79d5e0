"""The run page as a run goes on under it: a live update changes what the header and the step
table say, never how they look (the header kept its first style; the status column kept the width
of its first, shorter words and cut "✓ completed")."""

from __future__ import annotations

from typing import Any

from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

SLOW = """slug: ui-live
steps:
  - id: warm_up
    run_command: "sleep 4; echo warm"
  - id: finish
    run_command: echo done
"""

# Panel draws into shadow roots: locators reach in, document.querySelector does not.
HEADER_STYLE = """e => {
  const s = getComputedStyle(e.closest('h4'));
  return [s.fontSize, s.fontWeight, s.fontFamily, s.marginTop, s.marginBottom].join('|');
}"""
CUT = "cells => cells.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.innerText)"
STATUS_CELLS = ".tabulator-cell[tabulator-field='status']"


def statuses(page: Any) -> list[str]:
    cells = page.locator(STATUS_CELLS).all()
    return [c.inner_text().strip() for c in cells]


def test_a_live_update_keeps_the_header_and_the_status_column_whole(page, stack):
    with db.connect(stack.url) as conn:
        apply_recipe(conn, load_recipe_text(SLOW))
        run_id = spawn(conn, "ui-live", {}).run_id
    page.goto(stack.base + f"/run?id={run_id}")
    page.wait_for_selector("#tl-run-state:text-is('running')")
    first = page.locator("#tl-run-state").evaluate(HEADER_STYLE)
    harness.wait_for_state(stack.url, run_id, "completed", timeout=60)
    page.wait_for_selector("#tl-run-state:text-is('completed')")
    harness.wait_for(
        lambda: statuses(page) == ["✓ completed", "✓ completed"],
        timeout=30,
        what="both steps completed on the page",
    )
    page.wait_for_timeout(300)  # the table's layout after the patch
    assert page.locator("#tl-run-state").evaluate(HEADER_STYLE) == first
    assert page.locator(STATUS_CELLS).evaluate_all(CUT) == []
