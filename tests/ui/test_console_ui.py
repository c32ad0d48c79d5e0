"""The console in headless Chromium against a real server, conductor and bots."""

from __future__ import annotations

import re
import signal
from typing import Any

from engine_adapter import db, harness, threads
from engine_adapter.spawn import spawn

BAD = "slug: ui-flow\nbot: local\nsteps:\n  - id: check\n    run_comand: echo hi\n"
GOOD = """slug: ui-flow
name: UI flow
bot: local
steps:
  - id: check
    run_command: echo checked {{ payload.ticket }}
  - id: confirm
    human_gate: "Ticket {{ payload.ticket }} checked. Go on?"
  - id: done
    run_command: echo shipped
"""
GATE = """slug: ui-gate
bot: local
steps:
  - id: ask
    human_gate: "Release batch {{ payload.batch }}?"
    timeout: 1h
  - id: after
    run_command: echo released
"""


def set_editor(page: Any, text: str) -> None:
    page.click(".ace_content")
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)


def stepper_status(page: Any, step: str) -> str:
    """The status cell of a step's row in the stepper ('' while the row is not there)."""
    for row in page.locator(".tabulator-row").all():
        cells = row.locator(".tabulator-cell[tabulator-field='step']")
        if cells.count() and cells.first.inner_text().strip() == step:
            return row.locator(".tabulator-cell[tabulator-field='status']").inner_text()
    return ""


def wait_status(page: Any, step: str, status: str) -> None:
    harness.wait_for(lambda: status in stepper_status(page, step), timeout=30, interval=0.1,
                     what=f"step {step} to show {status}")


def test_create_recipe_in_editor_spawn_it_and_answer_its_gate(page, stack):
    page.goto(stack.base + "/recipe?new=1")
    page.wait_for_selector(".ace_content")
    set_editor(page, BAD)
    page.wait_for_selector("#tl-validation:has-text('steps[0].run_comand: unknown field')")
    assert page.locator("button:has-text('Create')").is_disabled()
    set_editor(page, GOOD)
    page.wait_for_selector("#tl-validation:has-text('Valid · 3 steps')")
    page.click("button:has-text('Create')")
    page.wait_for_selector("#tl-saved:has-text('ui-flow v1')")

    page.goto(stack.base + "/recipe?slug=ui-flow")
    page.locator("textarea[placeholder^='{\"key']").fill('{"ticket": "T-42"}')
    page.click("button:has-text('Spawn a run')")
    link = page.wait_for_selector("#tl-spawned a")
    run_id = link.inner_text()
    link.click()
    page.wait_for_url(re.compile(r"/run\?id="))
    page.wait_for_selector("#tl-run-state")
    wait_status(page, "check", "completed")  # the stepper advances with no reload
    wait_status(page, "confirm", "gate")
    page.wait_for_selector(".tl-kind-question:has-text('Ticket T-42 checked. Go on?')")

    page.fill("textarea[placeholder^='Reply in the thread']", "approve, looks fine")
    page.click("button:has-text('Send')")
    page.wait_for_selector(".tl-human:has-text('approve, looks fine')")
    wait_status(page, "done", "completed")
    page.wait_for_selector("#tl-run-state:text-is('completed')")
    view = harness.wait_for_state(stack.url, run_id, "completed")
    assert view["steps"][2]["output"].strip() == "shipped"
    replies = [e for e in view["thread"] if e["author_kind"] == "human"]
    assert len(replies) == 1 and replies[0]["text"] == "approve, looks fine"


def test_runs_page_is_live_and_keeps_filters_in_the_url(page, stack):
    with db.connect(stack.url) as conn:
        harness_apply(conn, GATE)
        before = conn.execute("select count(*) as n from threadline.run_threads where workflow = 'ui-gate'"
                              ).fetchone()["n"]
        page.goto(stack.base + "/?workflow=ui-gate")
        page.wait_for_selector(f".tl-counts :text('all {before}')")
        run_id = spawn(conn, "ui-gate", {"batch": 1}).run_id
        page.wait_for_selector(f"a[href='/run?id={run_id}']")  # appeared without a reload
        page.wait_for_selector(f".tl-counts :text('all {before + 1}')")
        harness.wait_for_state(stack.url, run_id, "waiting")
        page.wait_for_selector(".tl-counts :text('waiting')")
        page.locator("select").nth(1).select_option("waiting")
        page.wait_for_url(re.compile(r"state=waiting"))
        assert "workflow=ui-gate" in page.url
        page.reload()
        page.wait_for_selector(f"a[href='/run?id={run_id}']")
        assert page.locator("select").nth(1).input_value() == "waiting"
        threads.decide(conn, run_id, "deny", "tester")


def harness_apply(conn: Any, text: str) -> str:
    from engine_adapter.recipes import load_recipe_text
    from engine_adapter.workflows import apply_recipe

    return apply_recipe(conn, load_recipe_text(text)).slug


def test_needs_you_lists_open_gates_and_approves_in_place(page, stack):
    with db.connect(stack.url) as conn:
        harness_apply(conn, GATE)
        run_id = spawn(conn, "ui-gate", {"batch": 7}).run_id
        harness.wait_for_state(stack.url, run_id, "waiting")
        page.goto(stack.base + "/needs-you")
        card = page.locator(".tl-gate-card", has=page.locator("text=Release batch 7?"))
        card.wait_for()
        card.locator(".tl-gate-meta:has-text('times out in')").wait_for()
        assert "waiting" in card.locator(".tl-gate-meta").inner_text()
        card.locator("input").fill("batch looks right")
        card.locator("button:has-text('Approve')").click()
        card.wait_for(state="detached")  # removed in place once decided
        view = harness.wait_for_state(stack.url, run_id, "completed")
        decision = conn.execute("select actor, reason from threadline.decisions where run_id = %s",
                                (run_id,)).fetchone()
        assert decision["reason"] == "batch looks right" and decision["actor"]
        assert view["steps"][1]["output"].strip() == "released"


def test_badge_turns_red_when_the_conductor_dies_and_green_after_restart(page, stack):
    page.goto(stack.base + "/conductors")
    page.wait_for_selector("#tl-badge[data-color='green']")
    page.click("button:has-text('Kill the conductor (SIGKILL)')")  # the playground's button
    assert stack.conductor.wait(timeout=10) == -signal.SIGKILL
    page.wait_for_selector("#tl-badge[data-color='red']", timeout=10_000)
    assert "Conductor down" in page.locator("#tl-badge").inner_text()
    stack.restart_conductor()
    page.wait_for_selector("#tl-badge[data-color='green']", timeout=15_000)


def test_debug_pane_shows_the_engine_side_of_a_run(page, stack):
    with db.connect(stack.url) as conn:
        harness_apply(conn, GATE)
        run_id = spawn(conn, "ui-gate", {"batch": 9}).run_id
        harness.wait_for_state(stack.url, run_id, "waiting")
        page.goto(stack.base + f"/run?id={run_id}")
        page.wait_for_selector("#tl-run-state:text-is('waiting')")
        page.click("text=Debug: engine internals (Absurd)")
        page.wait_for_selector(f"text=threadline.step.done:{run_id}:ask:1")
        body = page.locator(".tl-debug").first.inner_text()
        assert "awaited" in page.content() or body
        assert page.locator("summary:has-text('send:ask:1')").count() == 1
        page.click("button:has-text('Approve')")
        page.wait_for_selector("#tl-run-state:text-is('completed')")


def test_double_clicked_spawn_makes_one_run(page, stack):
    with db.connect(stack.url) as conn:
        harness_apply(conn, GATE)
        count = lambda: conn.execute("select count(*) as n from threadline.run_threads where workflow = 'ui-gate'"
                                     ).fetchone()["n"]
        before = count()
        page.goto(stack.base + "/recipe?slug=ui-gate")
        page.wait_for_selector("button:has-text('Spawn a run')")
        page.locator("button:has-text('Spawn a run')").dblclick()
        page.wait_for_selector("#tl-spawned:has-text('the same run')")  # the second click arrived
        assert count() == before + 1
        page.wait_for_timeout(1200)
        page.locator("button:has-text('Spawn a run')").click()  # a deliberate click later: a new run
        harness.wait_for(lambda: count() == before + 2, what="a second, deliberate spawn")


def test_signed_in_user_is_who_replies(page, stack, tmp_path):
    """With sign-in configured, the console asks for a password and a reply carries the user's name."""
    users = tmp_path / "users.json"
    users.write_text('{"ann": "correct horse battery"}')
    port = harness.free_port()
    stack.procs.start("console", args=["--port", str(port)], env={
        "THREADLINE_CONSOLE_USERS": str(users), "THREADLINE_COOKIE_SECRET": "s" * 40})
    base = f"http://127.0.0.1:{port}"
    harness.wait_for(lambda: harness.answers(base + "/login"), timeout=90, interval=0.3, what="the signed-in console")
    with db.connect(stack.url) as conn:
        harness_apply(conn, GATE)
        run_id = spawn(conn, "ui-gate", {"batch": 11}).run_id
        harness.wait_for_state(stack.url, run_id, "waiting")
        page.goto(f"{base}/run?id={run_id}")
        page.wait_for_selector("input[name='password']")  # sent to the sign-in page first
        page.fill("input[name='username']", "ann")
        page.fill("input[name='password']", "wrong")
        page.click("button[type='submit'], input[type='submit']")
        page.wait_for_selector(".error:has-text('nvalid')")  # refused, still on the sign-in page
        page.fill("input[name='username']", "ann")
        page.fill("input[name='password']", "correct horse battery")
        page.click("button[type='submit'], input[type='submit']")
        page.wait_for_selector(".tl-user:has-text('ann')")  # signed in (Panel forgets the target after a failed try)
        page.goto(f"{base}/run?id={run_id}")
        page.wait_for_selector("#tl-run-state:text-is('waiting')")
        page.fill("textarea[placeholder^='Reply in the thread']", "👍")
        page.click("button:has-text('Send')")
        view = harness.wait_for_state(stack.url, run_id, "completed")
        assert [e["author"] for e in view["thread"] if e["author_kind"] == "human"] == ["ann"]


def test_long_output_arrives_folded_and_loads_in_full_on_demand(page, stack):
    with db.connect(stack.url) as conn:
        harness_apply(conn, "slug: ui-long\nbot: local\nsteps:\n  - id: talk\n"
                            "    run_command: python3 -c \"print('x' * 5000 + 'THE' + '-END')\"\n")
        run_id = spawn(conn, "ui-long", {}).run_id
        harness.wait_for_state(stack.url, run_id, "completed")
    page.goto(stack.base + f"/run?id={run_id}")
    button = page.locator("button:has-text('Show all (5008 chars)')")
    button.wait_for()
    assert page.locator(".tl-entry:has-text('THE-END')").count() == 0  # only the first part was sent
    button.click()
    page.wait_for_selector(".tl-entry:has-text('THE-END')")


def test_bad_links_say_what_is_wrong(page, stack):
    page.goto(stack.base + "/run?id=not-a-run")
    page.wait_for_selector(".tl-error:has-text('No run not-a-run (not a run id')")
    page.goto(stack.base + "/run?id=01a20640-0000-7000-8000-000000000000")
    page.wait_for_selector(".tl-error:has-text('No run 01a20640-0000-7000-8000-000000000000')")
    page.goto(stack.base + "/recipe?slug=no-such-flow")
    page.wait_for_selector(".tl-error:has-text(\"no workflow 'no-such-flow'\")")
    page.goto(stack.base + "/?state=exploded")
    page.wait_for_selector(".tl-error:has-text(\"state: 'exploded' is not a run state\")")


def test_editor_refuses_a_webhook_path_another_workflow_holds(page, stack):
    with db.connect(stack.url) as conn:
        harness_apply(conn, "slug: ui-hook-a\nbot: local\nwebhooks:\n  - path: ui/shared\nsteps:\n"
                            "  - id: s\n    run_command: echo a\n")
        before = conn.execute("select count(*) as n from threadline.workflows").fetchone()["n"]
    page.goto(stack.base + "/recipe?new=1")
    page.wait_for_selector(".ace_content")
    set_editor(page, "slug: ui-hook-b\nbot: local\nwebhooks:\n  - path: ui/shared\nsteps:\n"
                     "  - id: s\n    run_command: echo b\n")
    page.wait_for_selector("#tl-validation:has-text('Valid')")
    page.click("button:has-text('Create')")
    page.wait_for_selector(".tl-error:has-text('webhooks[0].path')")
    with db.connect(stack.url) as conn:
        assert conn.execute("select count(*) as n from threadline.workflows").fetchone()["n"] == before
