"""The run page says why a step failed (its exit code and the last lines of its output, in the
step table and under it) and shows an agent's tool calls with their arguments and results.

With THREADLINE_SCREENSHOTS=<dir>, the two pages are photographed into that directory (the
README's assets/step-failed-why.png and assets/agent-tool-calls.png come from here)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from engine_adapter.catalog.bot_config import apply_bots, parse_bots
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness
from tests.agent_server import ScriptedModel, answer, tool_call

FAILING = """slug: ui-migrate
name: Migrate the database
bot: local
steps:
  - id: backup
    run_command: echo "backup written"
  - id: migrate
    run_command: |
      echo "applying 0042_orders.sql"
      echo 'ERROR:  relation "orders" does not exist' >&2
      echo 'LINE 1: alter table orders add column shipped_at timestamptz' >&2
      exit 3
    retries: 1
    backoff: {initial: 1s, max: 1s}
  - id: notify
    run_command: echo "migrated"
"""


def cell(page: Any, step: str, field: str) -> str:
    """A cell of a step's row in the step table ('' while the row is not there)."""
    for row in page.locator(".tabulator-row").all():
        cells = row.locator(".tabulator-cell[tabulator-field='step']")
        if cells.count() and cells.first.inner_text().strip() == step:
            return row.locator(f".tabulator-cell[tabulator-field='{field}']").inner_text()
    return ""


def photograph(page: Any, name: str) -> None:
    where = os.environ.get("THREADLINE_SCREENSHOTS")
    if where:
        page.wait_for_timeout(500)  # the last patch drawn
        page.screenshot(path=str(Path(where) / name), full_page=True)


def test_a_failed_step_says_why_on_the_run_page(page, stack):
    with db.connect(stack.url) as conn:
        apply_recipe(conn, load_recipe_text(FAILING))
        run_id = spawn(conn, "ui-migrate", {}).run_id
        harness.wait_for_state(stack.url, run_id, "failed", timeout=60)
    page.goto(stack.base + f"/run?id={run_id}")
    page.wait_for_selector("#tl-run-state:text-is('failed')")
    harness.wait_for(
        lambda: "exit 3" in cell(page, "migrate", "detail"), timeout=30, what="the detail cell"
    )
    assert "orders" in cell(page, "migrate", "output")  # its output's last line, from stderr
    took = cell(page, "migrate", "duration")
    assert re.fullmatch(r"[\d.]+ m?s ✗ · [\d.]+ m?s ✗", took), took  # each attempt its own time
    why = page.locator("#tl-step-details .tl-why[data-step='migrate']")
    why.wait_for()
    text = why.inner_text()
    assert "Step migrate failed: exit 3" in text
    assert 'ERROR:  relation "orders" does not exist' in text
    photograph(page, "step-failed-why.png")


def test_an_agents_tool_calls_show_their_arguments_and_results(page, stack):
    script = [
        answer(
            "Let me look at the disk first.",
            tool_call("c1", "run_command", {"command": "df -h / | tail -n 1"}),
        ),
        answer(
            None,
            tool_call("c2", "write_file", {"path": "report.txt", "content": "disk checked"}),
        ),
        answer("The root disk has room; report.txt written."),
    ]
    with ScriptedModel(script) as model, db.connect(stack.url) as conn:
        apply_bots(conn, parse_bots({"ui-agent": {"base_url": model.base_url, "model": "m"}}))
        apply_recipe(
            conn,
            load_recipe_text(
                "slug: ui-agent-calls\nname: Disk check\nbot: ui-agent\nsteps:\n"
                "  - id: check-disk\n    dispatch_task: Check the disk and write a report\n"
                "    tools: [run_command, write_file]\n"
            ),
        )
        run_id = spawn(conn, "ui-agent-calls", {}).run_id
        harness.wait_for_state(stack.url, run_id, "completed", timeout=60)
    page.goto(stack.base + f"/run?id={run_id}")
    page.wait_for_selector("#tl-run-state:text-is('completed')")
    calls = page.locator("#tl-step-details .tl-calls[data-step='check-disk']")
    calls.wait_for()
    summaries = calls.locator("summary").all_inner_texts()
    assert summaries[0].startswith('run_command(command="df -h / | tail -n 1") → exit code 0')
    assert summaries[1].startswith('write_file(path="report.txt", content="disk checked") →')
    calls.locator("summary").first.click()  # unfolds the call: its arguments and whole result
    args = calls.locator(".tl-call-args").first
    args.wait_for(state="visible")
    assert '"command": "df -h / | tail -n 1"' in args.inner_text()
    assert calls.locator(".tl-call-result").first.inner_text().startswith("exit code 0")
    assert page.locator(".tl-entry:has-text('calls run_command(command=')").count() == 1
    photograph(page, "agent-tool-calls.png")
