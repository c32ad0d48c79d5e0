"""A conductor executor with nothing else to do holds a run after its SEND and takes the step's
done event on without parking the run (wakeups.Holds): a run of short steps is taken in hand
once, not once per step. Held or parked, the run's thread reads the same."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from engine_adapter.conductor.conductor import HOLD_ENV, Conductor
from engine_adapter.model.errors import Invalid
from engine_adapter.read.read_model import show_run
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

STEPS = 3
RECIPE = "slug: held\nsteps:\n" + "".join(
    f'  - {{id: s{i}, run_command: "echo {i}"}}\n' for i in range(1, STEPS + 1)
)


@contextmanager
def conductor_in_process(db_url: str) -> Iterator[Conductor]:
    """A conductor whose executors run here, so the test can count the runs they took in hand;
    its listening loop in a thread of its own (the timers are not needed)."""
    conductor = Conductor(db_url, threads=2)
    conductor.start_executors()

    def listen() -> None:
        while not conductor._stopping:
            conductor.wait_for_wake()

    loop = threading.Thread(target=listen, daemon=True)
    loop.start()
    try:
        yield conductor
    finally:
        conductor.stop()
        loop.join(timeout=10)
        conductor.close()


@pytest.mark.parametrize("hold_ms", [30_000, 0])
def test_a_run_of_short_steps_is_taken_in_hand_once_when_held(
    db_url, conn, apply, procs, monkeypatch, hold_ms
):
    monkeypatch.setenv(HOLD_ENV, str(hold_ms))
    apply(RECIPE)
    procs.start("bots", wait=True)
    with conductor_in_process(db_url) as conductor:
        run_id = spawn(conn, "held").run_id
        harness.wait_for_state(db_url, run_id, "completed")
        handled = sum(executor.handled for executor in conductor.executors)
    if hold_ms:
        assert handled == 1, f"the run was taken in hand {handled} times"
    else:  # each step parks the run on its done event, and its done event wakes it again
        assert handled >= 2, "no step parked the run with holds off"
    run = show_run(conn, run_id)
    assert [step["status"] for step in run["steps"]] == ["completed"] * STEPS
    assert [step["output"].strip() for step in run["steps"]] == ["1", "2", "3"]


@pytest.mark.parametrize("raw", ["-5", "soon", "60001"])
def test_a_bad_hold_setting_is_named(db_url, monkeypatch, raw):
    monkeypatch.setenv(HOLD_ENV, raw)
    with pytest.raises(Invalid, match=HOLD_ENV):
        Conductor(db_url, threads=1)
