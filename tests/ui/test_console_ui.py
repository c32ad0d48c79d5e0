"""The console in headless Chromium against a real server, conductor and bots."""

from __future__ import annotations

import re
import signal
from typing import Any

import pytest

from console.users import add_user, remove_user
from engine_adapter.model.identity import Actor
from engine_adapter.runs import gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

BAD = "slug: ui-flow\nbot: local\nsteps:\n  - id: check\n    run_comand: echo hi\n"
GOOD = """slug: ui-flow
name: UI flow
bot: local
steps:
  - id: check
    run_command: echo checked {{ payload.ticket }}
  - id: confirm
    human_gate: "Ticket {{ payload.ticket }} checked. Go on?"
    self_approval: true  # the one person at the console both starts the run and answers it
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
    harness.wait_for(
        lambda: status in stepper_status(page, step),
        timeout=30,
        interval=0.1,
        what=f"step {step} to show {status}",
    )


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
        before = conn.execute(
            "select count(*) as n from threadline.run_threads where workflow = 'ui-gate'"
        ).fetchone()["n"]
        page.goto(stack.base + "/?workflow=ui-gate")
        page.wait_for_selector(f".tl-counts :text('all {before}')")
        # Pushed, not polled: with the run list's change feed silenced, a new run does not show,
        # so nothing re-reads the list on a timer (6 s: past the liveness beat and the charts)...
        feed = "alter table threadline.run_threads {} trigger run_threads_announce"
        conn.execute(feed.format("disable"))
        try:
            unseen = spawn(conn, "ui-gate", {"batch": 0}).run_id
            page.wait_for_timeout(6000)
            assert page.locator(f"a[href='/run?id={unseen}']").count() == 0
        finally:
            conn.execute(feed.format("enable"))
        # ...and with it on, the next run shows within a moment, without a reload.
        run_id = spawn(conn, "ui-gate", {"batch": 1}).run_id
        page.wait_for_selector(f"a[href='/run?id={run_id}']", timeout=3000)
        page.wait_for_selector(f"a[href='/run?id={unseen}']", timeout=1000)
        page.wait_for_selector(f".tl-counts :text('all {before + 2}')")
        harness.wait_for_state(stack.url, unseen, "waiting")
        gates.decide(conn, unseen, "deny", Actor("tester", "console"))
        harness.wait_for_state(stack.url, run_id, "waiting")
        page.wait_for_selector(".tl-counts :text('waiting')")
        page.locator("select").nth(1).select_option("waiting")
        page.wait_for_url(re.compile(r"state=waiting"))
        assert "workflow=ui-gate" in page.url
        page.reload()
        page.wait_for_selector(f"a[href='/run?id={run_id}']")
        assert page.locator("select").nth(1).input_value() == "waiting"
        gates.decide(conn, run_id, "deny", Actor("tester", "console"))


def harness_apply(conn: Any, text: str) -> str:
    from engine_adapter.catalog.workflows import apply_recipe
    from engine_adapter.recipes.recipes import load_recipe_text

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
        decision = conn.execute(
            "select actor, reason from threadline.decisions where run_id = %s", (run_id,)
        ).fetchone()
        assert decision["reason"] == "batch looks right" and decision["actor"]
        assert view["steps"][1]["output"].strip() == "released"


def test_badge_turns_red_when_the_conductor_dies_and_green_after_restart(page, stack):
    page.goto(stack.base + "/conductors")
    page.wait_for_selector("#tl-badge[data-color='green']")
    # The conductor's first tick cleaned up (retention.py); the page says when and what.
    page.wait_for_selector(".tl-cleanup:has-text('Last cleanup')")
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
        # The run's current await is its gate's done event, and that event is awaited, not
        # emitted yet.
        event = f"threadline.step.done:{run_id}:ask:1"
        awaits = page.locator("h6:has-text('Current await') + table").inner_text()
        assert event in awaits and "no timeout" not in awaits  # the gate's 1h deadline
        row = page.locator(f"tr:has(code:text-is('{event}'))").inner_text()
        assert "awaited, not emitted yet" in row, row
        assert page.locator("summary:has-text('send:ask:1')").count() == 1
        page.click("button:has-text('Approve')")
        page.wait_for_selector("#tl-run-state:text-is('completed')")


def test_double_clicked_spawn_makes_one_run(page, stack):
    with db.connect(stack.url) as conn:
        harness_apply(conn, GATE)

        def count() -> int:
            return conn.execute(
                "select count(*) as n from threadline.run_threads where workflow = 'ui-gate'"
            ).fetchone()["n"]

        before = count()
        page.goto(stack.base + "/recipe?slug=ui-gate")
        page.wait_for_selector("button:has-text('Spawn a run')")
        page.locator("button:has-text('Spawn a run')").dblclick()
        page.wait_for_selector("#tl-spawned:has-text('the same run')")  # the second click arrived
        assert count() == before + 1
        page.wait_for_timeout(1200)
        page.locator(
            "button:has-text('Spawn a run')"
        ).click()  # a deliberate click later: a new run
        harness.wait_for(lambda: count() == before + 2, what="a second, deliberate spawn")


USERS = {"vic": ["viewer"], "otto": ["operator"], "abe": ["approver"]}
# Undo the page's hiding: set every disabled button's model enabled, in the browser, as a user with
# the developer tools could. Only the server's check then stands between the click and the write.
FORCE_ENABLE = """() => { let n = 0;
    for (const doc of Bokeh.documents) for (const m of doc.all_models) {
        if (m.disabled === true && typeof m.label === 'string') { m.disabled = false; n++; }
    }
    return n; }"""


@pytest.fixture(scope="module")
def users_console(stack) -> str:
    """A second console; a viewer, an operator and an approver have console passwords."""
    with db.connect(stack.url) as conn:
        for name, roles in USERS.items():
            add_user(conn, name, f"{name}'s password", roles)
    port = harness.free_port()
    stack.procs.start("console", args=["--port", str(port), "--no-link"])
    base = f"http://127.0.0.1:{port}"
    harness.wait_for(
        lambda: harness.answers(base + "/login"), timeout=90, interval=0.3, what="the users console"
    )
    return base


def force_click(page: Any, selector: str, expect: str) -> None:
    """Enable the button in the browser, click it and wait for the expect selector; the page
    re-disables the button as it re-renders (twice a second while a run waits), so if that came
    first and the click did nothing, try again."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for _ in range(5):
        page.evaluate(FORCE_ENABLE)
        try:
            page.locator(selector).click(timeout=1500)
            page.wait_for_selector(expect, timeout=3000)
            return
        except PlaywrightTimeout:
            continue
    raise AssertionError(f"clicking {selector}, forced, never showed {expect}")


def sign_in_as(browser: Any, base: str, name: str, password: str | None = None) -> Any:
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(20_000)
    page.goto(base + "/recipes")
    page.wait_for_selector("input[name='password']")  # sent to the sign-in page first
    page.fill("input[name='username']", name)
    page.fill("input[name='password']", password or f"{name}'s password")
    page.click("button[type='submit']")
    page.wait_for_selector(f".tl-user:has-text('{name}')")
    return page


def human_entries(url: str, run_id: str) -> list[str]:
    view = harness.wait_for_state(url, run_id, ("waiting", "completed", "failed", "cancelled"))
    return [e["author"] for e in view["thread"] if e["author_kind"] == "human"]


def test_a_wrong_password_is_refused_and_a_reply_carries_the_signed_in_user(
    browser, stack, users_console
):
    with db.connect(stack.url) as conn:
        harness_apply(conn, GATE)
        run_id = spawn(conn, "ui-gate", {"batch": 11}).run_id
    harness.wait_for_state(stack.url, run_id, "waiting")
    page = browser.new_context().new_page()
    page.goto(f"{users_console}/run?id={run_id}")
    page.fill("input[name='username']", "otto")
    page.fill("input[name='password']", "wrong")
    page.click("button[type='submit']")
    page.wait_for_selector("#tl-login-message:has-text('Invalid user name or password')")
    page.context.close()
    page = sign_in_as(browser, users_console, "otto")
    page.goto(f"{users_console}/run?id={run_id}")
    page.wait_for_selector("#tl-run-state:text-is('waiting')")
    page.fill("textarea[placeholder^='Reply in the thread']", "on it")
    page.click("button:has-text('Send')")
    harness.wait_for(lambda: human_entries(stack.url, run_id) == ["otto"], what="otto's reply")
    page.context.close()


def test_a_viewer_cannot_reply_cancel_or_spawn_even_with_the_buttons_forced(
    browser, stack, users_console
):
    with db.connect(stack.url) as conn:
        harness_apply(conn, GATE)
        run_id = spawn(conn, "ui-gate", {"batch": 12}).run_id
    harness.wait_for_state(stack.url, run_id, "waiting")
    page = sign_in_as(browser, users_console, "vic")
    page.goto(f"{users_console}/run?id={run_id}")
    page.wait_for_selector("#tl-run-state:text-is('waiting')")
    page.wait_for_selector(
        "#tl-permissions:has-text('vic (viewer) may not reply, cancel, retry or emit')"
    )
    assert page.locator("button:has-text('Send')").is_disabled()
    page.click(".card-header:has-text('Actions')")
    assert page.locator("button:has-text('Cancel run')").is_disabled()
    page.fill("textarea[placeholder^='Reply in the thread']", "approve")
    force_click(
        page,
        "button:has-text('Send')",
        ".tl-error:has-text('vic (viewer) may not reply: that needs the operator or approver')",
    )
    force_click(
        page,
        "button:has-text('Cancel run')",
        ".tl-error:has-text('vic (viewer) may not cancel a run')",
    )
    force_click(
        page,
        "button:has-text('Approve')",
        ".tl-error:has-text('vic (viewer) may not approve a gate')",
    )
    assert human_entries(stack.url, run_id) == []
    assert harness.wait_for_state(stack.url, run_id, "waiting")["state"] == "waiting"

    with db.connect(stack.url) as conn:
        before = conn.execute("select count(*) as n from threadline.run_threads").fetchone()["n"]
    page.goto(f"{users_console}/recipe?slug=ui-gate")
    page.wait_for_selector(
        "#tl-permissions:has-text('vic (viewer) may not save, roll back or spawn')"
    )
    assert page.locator("button:has-text('Spawn a run')").is_disabled()
    force_click(
        page,
        "button:has-text('Spawn a run')",
        ".tl-error:has-text('vic (viewer) may not spawn a run')",
    )
    with db.connect(stack.url) as conn:
        assert (
            conn.execute("select count(*) as n from threadline.run_threads").fetchone()["n"]
            == before
        )
    page.context.close()


def test_an_operator_cannot_approve_and_an_approver_can(browser, stack, users_console):
    with db.connect(stack.url) as conn:
        harness_apply(conn, GATE)
        run_id = spawn(conn, "ui-gate", {"batch": 13}).run_id
    harness.wait_for_state(stack.url, run_id, "waiting")
    page = sign_in_as(browser, users_console, "otto")
    page.goto(f"{users_console}/run?id={run_id}")
    page.wait_for_selector("#tl-permissions:has-text('otto (operator) may not approve or deny')")
    assert page.locator("button:has-text('Approve')").is_disabled()
    force_click(
        page,
        "button:has-text('Approve')",
        ".tl-error:has-text('otto (operator) may not approve a gate: "
        "that needs the approver role')",
    )
    assert harness.wait_for_state(stack.url, run_id, "waiting")["state"] == "waiting"
    page.goto(f"{users_console}/needs-you")
    page.wait_for_selector("#tl-permissions:has-text('otto (operator) may not approve or deny')")
    assert page.locator("button:has-text('Approve')").first.is_disabled()
    page.context.close()

    page = sign_in_as(browser, users_console, "abe")
    page.goto(f"{users_console}/run?id={run_id}")
    page.wait_for_selector("#tl-run-state:text-is('waiting')")
    page.click("button:has-text('Approve')")
    view = harness.wait_for_state(stack.url, run_id, "completed")
    assert view["steps"][1]["output"].strip() == "released"
    page.context.close()


def test_the_header_says_who_is_signed_in_and_signing_out_ends_the_session(page, stack):
    page.wait_for_selector(".tl-user:has-text('(approver, operator, viewer)')")
    kept = [c for c in page.context.cookies() if c["name"] == "threadline_session"]
    page.click("a:has-text('sign out')")
    page.wait_for_selector("#tl-login-message:has-text('Signed out.')")
    page.context.add_cookies(kept)  # a copy kept from before: the session it named is gone
    page.goto(stack.base + "/recipes")
    page.wait_for_url(re.compile(r"/login\?next=%2Frecipes"))
    page.wait_for_selector("text=Open a sign-in link")


def test_long_output_arrives_folded_and_loads_in_full_on_demand(page, stack):
    with db.connect(stack.url) as conn:
        harness_apply(
            conn,
            "slug: ui-long\nbot: local\nsteps:\n  - id: talk\n"
            "    run_command: python3 -c \"print('x' * 5000 + 'THE' + '-END')\"\n",
        )
        run_id = spawn(conn, "ui-long", {}).run_id
        harness.wait_for_state(stack.url, run_id, "completed")
    page.goto(stack.base + f"/run?id={run_id}")
    button = page.locator("button:has-text('Show all (5008 chars)')")
    button.wait_for()
    assert (
        page.locator(".tl-entry:has-text('THE-END')").count() == 0
    )  # only the first part was sent
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
        harness_apply(
            conn,
            "slug: ui-hook-a\nbot: local\nwebhooks:\n  - path: ui/shared\nsteps:\n"
            "  - id: s\n    run_command: echo a\n",
        )
        before = conn.execute("select count(*) as n from threadline.workflows").fetchone()["n"]
    page.goto(stack.base + "/recipe?new=1")
    page.wait_for_selector(".ace_content")
    set_editor(
        page,
        "slug: ui-hook-b\nbot: local\nwebhooks:\n  - path: ui/shared\nsteps:\n"
        "  - id: s\n    run_command: echo b\n",
    )
    page.wait_for_selector("#tl-validation:has-text('Valid')")
    page.click("button:has-text('Create')")
    page.wait_for_selector(".tl-error:has-text('webhooks[0].path')")
    with db.connect(stack.url) as conn:
        assert (
            conn.execute("select count(*) as n from threadline.workflows").fetchone()["n"] == before
        )


def test_without_sign_in_every_page_warns(browser, stack):
    port = harness.free_port()
    stack.procs.start("console", args=["--port", str(port), "--no-auth"])
    base = f"http://127.0.0.1:{port}"
    harness.wait_for(
        lambda: harness.answers(base + "/recipes"),
        timeout=90,
        interval=0.3,
        what="the --no-auth console",
    )
    page = browser.new_context().new_page()
    for path in ("/", "/recipes"):
        page.goto(base + path)
        page.wait_for_selector("#tl-no-auth:has-text('sign-in is off (--no-auth)')")
    page.context.close()


def test_an_open_page_ends_when_the_password_is_removed(browser, stack, users_console):
    page = sign_in_as(browser, users_console, "otto")
    page.goto(users_console + "/recipes")
    page.wait_for_selector(".tl-user:has-text('otto')")
    with db.connect(stack.url) as conn:
        remove_user(conn, "otto")
        try:
            page.wait_for_selector("#tl-signed-out:has-text('Your session has ended')")
        finally:
            add_user(conn, "otto", "otto's password", USERS["otto"])
    page.context.close()
    sign_in_as(browser, users_console, "otto").context.close()  # set again: otto signs in again


FLOW = """slug: ui-control-flow
bot: local
steps:
  - id: fan
    parallel:
      left:
        - id: left
          run_command: echo L
      right:
        - id: right
          run_command: echo R
  - id: go
    wait_for_event: ui.go
    key: "{{ payload.k }}"
  - id: after
    run_command: echo "after {{ steps.left.output }}"
"""


def test_run_page_shows_the_tree_delivers_an_event_and_reruns_from_a_step(page, stack):
    with db.connect(stack.url) as conn:
        harness_apply(conn, FLOW)
        run_id = spawn(conn, "ui-control-flow", {"k": "k1"}).run_id
    page.goto(stack.base + f"/run?id={run_id}")
    page.wait_for_selector("#tl-run-state:text-is('waiting')", timeout=30000)
    for step in ("left", "right"):  # branch steps, drawn inside the group
        wait_status(page, step, "completed")
    wait_status(page, "go", "waiting")
    related = page.locator("#tl-related").inner_text()
    assert "runs started by its steps: fan/left (completed), fan/right (completed)" in related
    page.click("text=Actions")
    name = page.get_by_label("Deliver an event (ends waits for it)")
    harness.wait_for(lambda: name.input_value() == "ui.go", timeout=10, what="the event offered")
    assert page.get_by_label("key").input_value() == "k1"
    page.click("button:has-text('Deliver')")
    page.wait_for_selector("#tl-run-state:text-is('completed')", timeout=30000)
    wait_status(page, "after", "completed")

    choice = page.locator("select").filter(has_text="after")
    choice.select_option("after")
    harness.wait_for(lambda: choice.input_value() == "after", timeout=10, what="the choice")
    page.wait_for_timeout(500)  # the choice reaches the server before the click does
    page.click("button:has-text('Rerun from step')")
    try:
        link = page.wait_for_selector("#tl-rerun-link a", timeout=30000)
    except Exception:  # say what the page answered instead
        pytest.fail(
            "no rerun link; the page said: "
            + page.locator(".tl-error").all_inner_texts().__repr__()
        )
    page.goto(stack.base + link.get_attribute("href"))
    page.wait_for_selector("#tl-run-state:text-is('completed')", timeout=30000)
    wait_status(page, "fan", "carried_over")
    wait_status(page, "go", "carried_over")
    assert "rerun of" in page.locator("#tl-related").inner_text()
    # Leaving a live page mid-write is normal: no traceback for it in the console's log.
    assert "WebSocketClosedError" not in (stack.procs.home / "console.log").read_text()


def test_proposals_page_shows_the_diff_and_approves_then_applies(page, stack):
    from engine_adapter.catalog import proposals
    from engine_adapter.recipes.recipes import load_recipe_text

    base = "slug: ui-proposed\nallow_proposals: true\nsteps:\n  - id: s\n    run_command: echo a\n"
    with db.connect(stack.url) as conn:
        harness_apply(conn, base)
        current = conn.execute(
            "select hash from threadline.workflows where slug = 'ui-proposed'"
        ).fetchone()["hash"]
        made = proposals.propose(
            conn,
            "ui-proposed",
            current,
            load_recipe_text(base.replace("echo a", "echo b")),
            "say b instead",
            Actor("carol", "api"),
        )
        page.goto(stack.base + "/proposals")
        shown = f".tl-proposal[data-id='{made['id']}']"
        page.locator(shown, has_text="step s runs a new command").wait_for()
        assert "+    run_command: echo b" in page.locator(f"{shown} .tl-diff").inner_text()
        card = page.locator(".tl-gate-card", has=page.locator(shown))
        card.locator("button:has-text('Approve')").click()
        page.locator(f".tl-ok:has-text('Approved proposal #{made['id']}')").wait_for()
        card = page.locator(".tl-gate-card", has=page.locator(shown))
        card.locator("button:has-text('Apply')").click()
        page.locator(f".tl-ok:has-text('Applied proposal #{made['id']}: version 2')").wait_for()
        assert proposals.get(conn, made["id"])["status"] == "applied"


def test_the_recipe_page_rolls_back_to_an_earlier_version(page, stack):
    one = "slug: ui-versions\nsteps:\n  - id: s\n    run_command: echo one\n"
    with db.connect(stack.url) as conn:
        harness_apply(conn, one)
        harness_apply(conn, one.replace("echo one", "echo two"))
        page.goto(stack.base + "/recipe?slug=ui-versions")
        # The page compares the current version with the one before it, v1, at once.
        page.locator("pre:has-text('-    run_command: echo one')").wait_for()
        page.locator("button:has-text('Roll back to this version')").click()
        page.locator(".tl-ok:has-text('rolled back: now v3 (a copy of v1)')").wait_for()
        rows = conn.execute(
            "select version, source, rolled_back_from from threadline.workflow_versions"
            " where slug = 'ui-versions' order by version"
        ).fetchall()
        assert [(r["version"], r["source"], r["rolled_back_from"]) for r in rows] == [
            (1, "create", None),
            (2, "update", None),
            (3, "rollback", 1),
        ]
