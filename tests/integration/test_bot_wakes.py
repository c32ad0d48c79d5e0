"""An instruction wakes a bots process only when no older instruction for the same bot waits
(migration 055): under load every slot is busy and claims again when done, so the wake-up
(a commit to send, a commit to read in the host's listener) did nothing. A skipped wake-up
strands no step: the claim that takes the older instruction takes this one next.

A wake-up reaches the host's bots process through the database or handed over directly
(meeting.py), so the tests hear them as a process of the host does: through its listener, the
notes it acts on and those it only looks at."""

from __future__ import annotations

import time

import psycopg
import pytest

from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from tests.host_ear import HostEar
from tests.parks import sent_and_parked

RECIPE = """
slug: {slug}
bot: {bot}
steps:
  - {{id: a, run_command: "true"}}
"""


@pytest.fixture
def bots_listener(db_url: str):
    ear = HostEar(db_url, "bots", db.BOTS_CHANNEL)
    with ear.listener:
        yield ear


def wait_until_sent(conn: psycopg.Connection, run_id: str) -> None:
    deadline = time.monotonic() + 30
    while not conn.execute(
        "select 1 from threadline.run_threads where run_id = %s and await_kind = 'bot'"
        " and awaiting",
        (run_id,),
    ).fetchone():
        assert time.monotonic() < deadline, f"run {run_id}'s step was never sent"
        time.sleep(0.05)


def test_an_instruction_behind_another_of_its_bot_wakes_nobody(conn, apply, procs, bots_listener):
    apply(RECIPE.format(slug="shell-step", bot="shell"))
    apply(RECIPE.format(slug="other-step", bot="investigator"))
    procs.start("conductor", wait=True)  # no bots yet: every step waits to be claimed
    first = str(spawn(conn, "shell-step").run_id)
    wait_until_sent(conn, first)
    assert bots_listener.heard(1.0) == [f"instruction:{first}"]

    behind = str(spawn(conn, "shell-step").run_id)
    wait_until_sent(conn, behind)
    other_bot = str(spawn(conn, "other-step").run_id)
    wait_until_sent(conn, other_bot)
    # The second shell step waits behind the first; the other bot's step waits behind none.
    assert bots_listener.heard(1.0) == [f"instruction:{other_bot}"]

    procs.start("bots", wait=True)  # the skipped wake-up strands nothing
    deadline = time.monotonic() + 60
    while True:
        states = {
            str(r["run_id"]): r["state"]
            for r in conn.execute(
                "select run_id, state from threadline.run_threads where run_id = any(%s)",
                ([first, behind, other_bot],),
            )
        }
        if set(states.values()) == {"completed"}:
            break
        assert time.monotonic() < deadline, f"runs did not complete: {states}"
        time.sleep(0.1)


def test_a_step_in_progress_is_not_a_waiting_one(conn, apply, procs, bots_listener):
    """Once the older instruction is claimed, the next one wakes a bot again."""
    apply(RECIPE.format(slug="sleepy", bot="shell").replace('"true"', '"sleep 30"'))
    procs.start("conductor", wait=True)
    procs.start("bots", wait=True)
    first = str(spawn(conn, "sleepy").run_id)
    deadline = time.monotonic() + 30
    while not conn.execute(
        "select 1 from threadline.step_claims where run_id = %s and finished_at is null", (first,)
    ).fetchone():
        assert time.monotonic() < deadline, "the first step was never claimed"
        time.sleep(0.05)
    bots_listener.heard(0.2)
    second = str(spawn(conn, "sleepy").run_id)
    wait_until_sent(conn, second)
    assert f"instruction:{second}" in bots_listener.heard(1.0)


def test_a_queued_instruction_parks_its_run_in_its_send(conn, apply, procs):
    """An executor holds a run after its SEND for a done event that comes soon; one whose
    instruction waits behind another's cannot come within the hold, so the run parks in the
    SEND's own transaction: the park's event row has the SEND checkpoint's xid."""
    apply(RECIPE.format(slug="shell-step", bot="shell"))
    procs.start("conductor", wait=True)  # holds on (the default); no bots: the steps wait
    first = str(spawn(conn, "shell-step").run_id)
    wait_until_sent(conn, first)
    behind = str(spawn(conn, "shell-step").run_id)
    row = sent_and_parked(conn, behind)
    assert row["send"] == row["park"], row
