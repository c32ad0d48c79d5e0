"""A run's end, said on the conductors' channel for the change feed's readers, wakes no executor
(a claim for it would find nothing) and parks no held run; other work still does both."""

from __future__ import annotations

import pytest

from engine_adapter.model.vocab import RunState
from engine_adapter.store.wakeups import Holds, Wake, route_wake

RUN = "0b7e4b8e-4f5a-4c1e-9d3b-3f8f2a1c5d6e"


@pytest.mark.parametrize("state", [RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED])
def test_a_run_ended_wakes_nobody_and_cuts_no_hold(state):
    wake, holds = Wake(4), Holds(5.0)
    held = holds.hold(RUN)
    assert held is not None
    route_wake(f"{state}:another-run", wake, holds)
    assert wake.idle() == 0, "a wake-up is pending for a run's end"
    assert not held.event.is_set(), "a held run was parked for a run's end"
    route_wake("spawn:x", wake, holds)  # work, with no executor idle: the held run parks
    assert wake.idle() < 0 and held.event.is_set()
