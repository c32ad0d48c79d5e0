"""A run's end wakes nobody (engine_adapter/store/db.py): the change feed tells consoles and
widgets, and what the end releases has wake-ups of its own; work still wakes its processes."""

from __future__ import annotations

import pytest

from engine_adapter.model.vocab import RunState
from engine_adapter.store import db

RUN = "0b7e4b8e-4f5a-4c1e-9d3b-3f8f2a1c5d6e"


@pytest.mark.parametrize("state", [RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED])
def test_a_runs_end_wakes_nobody(state):
    assert db.wake_target(RUN, state) == (None, "")


def test_work_still_wakes_the_conductors_and_the_bots():
    assert db.wake_target(RUN, "retry") == (db.NOTIFY_CHANNEL, f"retry:{RUN}")
    assert db.wake_target(RUN, "instruction") == (db.BOTS_CHANNEL, f"instruction:{RUN}")
