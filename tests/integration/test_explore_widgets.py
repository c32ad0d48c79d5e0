"""Live notebook widgets (issue 25): a run widget, a runs table and the process badge redraw on
the database's change feed, with no call from the notebook, while a real conductor and bot
process run the runs and the CLI decides a gate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from engine_adapter import connect
from engine_adapter.testing import harness

RECIPES = Path(__file__).parents[2] / "assets" / "recipes"


@pytest.fixture
def recipes(apply):
    """The example recipes a reader meets first: a question gate and a two-step hello."""
    for name in ("wait-for-reply", "hello"):
        apply((RECIPES / f"{name}.yaml").read_text())


def test_a_run_widget_follows_a_gate_decided_from_the_cli(recipes, procs, db_url, logins):
    procs.start("conductor")
    procs.start("bots")
    run = connect(url=db_url, write=True).spawn("wait-for-reply")
    harness.wait_for_state(db_url, run, "waiting")

    tl = connect(url=logins["viewer"])
    w = tl.run_widget(run)
    assert w.state == "waiting" and w.awaiting_gate
    assert "⏳" in w.steps_html.value and "ask" in w.steps_html.value
    # A read-only client's buttons do nothing: they are disabled and say why.
    assert w.approve_button.disabled and "read-only" in w.approve_button.tooltip
    w._act("approve")
    assert "read-only" in w.message.value

    decided = harness.run_cli(db_url, "approve", run)
    assert decided.returncode == 0, decided.stderr
    # Nothing here asks the widget again: the feed's thread redraws it.
    harness.wait_for(lambda: w.state == "completed", timeout=30, what="the widget to follow")
    assert "approve" in w.steps_html.value and "echo" in w.steps_html.value
    assert not w.awaiting_gate and w.approve_button.disabled
    tl.close()


def test_a_write_clients_buttons_reply_approve_and_deny(recipes, procs, db_url):
    procs.start("conductor")
    procs.start("bots")
    tl = connect(url=db_url, write=True)
    runs = [tl.spawn("wait-for-reply") for _ in range(3)]
    for run in runs:
        harness.wait_for_state(db_url, run, "waiting")
    replied, approved, denied = (tl.run_widget(run) for run in runs)
    assert replied.awaiting_gate and not replied.approve_button.disabled
    replied.reply_text.value = "looks fine"
    replied.reply_button.click()  # this gate takes any reply as its answer
    assert replied.message.value == "reply: done"
    harness.wait_for(lambda: replied.state == "completed", timeout=30, what="the replied run")
    assert "looks fine" in replied.thread_html.value and "💬" in replied.steps_html.value
    approved.approve_button.click()
    assert approved.message.value == "approve: done"
    harness.wait_for(lambda: approved.state == "completed", timeout=30, what="the approved run")
    denied.reason_text.value = "not today"
    denied.deny_button.click()
    assert denied.message.value == "deny: done"
    harness.wait_for(lambda: denied.state == "cancelled", timeout=30, what="the denied run")
    assert "⛔" in denied.steps_html.value and denied.deny_button.disabled
    tl.close()


def test_the_runs_table_filters_and_the_badge_counts_live_processes(recipes, procs, db_url, logins):
    tl = connect(url=logins["viewer"])
    badge = tl.badge()
    assert badge.alive == {} and "0 conductor(s)" in badge.value
    procs.start("conductor")
    procs.start("bots")
    harness.wait_for(lambda: badge.alive.get("conductor") == 1, timeout=30, what="the badge")

    table = tl.runs_widget()
    writer = connect(url=db_url, write=True)
    gated = writer.spawn("wait-for-reply")
    other = writer.spawn("hello", {"name": "you"})
    harness.wait_for(lambda: table.count == 2, timeout=30, what="new runs in the table")
    harness.wait_for_state(db_url, other, "completed")
    table.workflow_filter.value = "hello"
    assert table.count == 1 and other in table.table.value and gated not in table.table.value
    table.workflow_filter.value = None
    table.state_filter.value = "waiting"
    harness.wait_for(lambda: table.count == 1, timeout=30, what="the waiting run")
    assert gated in table.table.value
    tl.close()


def test_a_widget_made_where_another_loop_runs_still_follows(recipes, procs, db_url):
    """Playwright's sync API keeps an event loop running in its caller's thread that runs only
    inside its own calls: a widget made there must not hand its redraws to that loop, where they
    would wait until something ran it. Here the loop is held by the blocking wait itself."""
    procs.start("conductor")
    procs.start("bots")
    tl = connect(url=db_url, write=True)
    run = tl.spawn("wait-for-reply")
    harness.wait_for_state(db_url, run, "waiting")

    async def followed_while_this_loop_runs_nothing() -> None:
        w = tl.run_widget(run)
        assert w.state == "waiting"
        decided = harness.run_cli(db_url, "approve", run)
        assert decided.returncode == 0, decided.stderr
        harness.wait_for(lambda: w.state == "completed", timeout=30, what="the widget to follow")

    asyncio.run(followed_while_this_loop_runs_nothing())
    tl.close()


def test_in_a_real_kernel_the_widgets_hand_their_redraws_to_its_loop(tmp_path):
    """In a Jupyter kernel the widgets' values are set on the kernel's own loop: the one its
    cells run in."""
    cell = (
        "import asyncio\n"
        "from engine_adapter.explore.widgets import kernel_loop\n"
        "assert kernel_loop() is asyncio.get_running_loop()"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
