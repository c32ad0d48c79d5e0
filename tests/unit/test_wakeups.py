"""A conductor's wake-ups: which notification wakes an idle executor, which goes to the executor
holding a run for its done event, and when held runs are made to park."""

from __future__ import annotations

import threading
import time

import pytest

from engine_adapter.store.wakeups import Holds, Wake, route_wake

RUN = "0b7e4b8e-4f5a-4c1e-9d3b-3f8f2a1c5d6e"


def idle_thread(wake: Wake) -> threading.Thread:
    """A thread waiting for a wake-up, as an idle executor does; started and seen waiting."""
    thread = threading.Thread(target=wake.wait, args=(30.0,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while wake.idle() < 1:
        assert time.monotonic() < deadline, "the thread never started waiting"
        time.sleep(0.001)
    return thread


def test_idle_counts_waiting_threads_no_wake_up_is_on_its_way_to():
    wake = Wake(4)
    assert wake.idle() == 0
    thread = idle_thread(wake)
    assert wake.idle() == 1
    wake.signal()  # on its way to the waiting thread
    thread.join(timeout=10)
    assert not thread.is_alive() and wake.idle() == 0


def test_a_held_runs_done_notification_goes_to_its_holder_and_wakes_nobody():
    wake, holds = Wake(4), Holds(5.0)
    waiter = idle_thread(wake)
    hold = holds.hold(RUN)
    assert hold is not None and not hold.event.is_set()
    route_wake(f"step.done:{RUN}", wake, holds)
    assert hold.wait()
    assert wake.idle() == 1, "an idle executor was woken for a run another holds"
    # Handed on once: the same notification again is an ordinary wake-up.
    route_wake(f"step.done:{RUN}", wake, holds)
    waiter.join(timeout=10)
    assert not waiter.is_alive()


def test_a_done_notification_of_a_run_no_one_holds_wakes_an_executor():
    wake, holds = Wake(4), Holds(5.0)
    waiter = idle_thread(wake)
    hold = holds.hold("another-run")
    route_wake(f"step.done:{RUN}", wake, holds)
    waiter.join(timeout=10)
    assert not waiter.is_alive() and hold is not None and not hold.event.is_set()


def test_work_with_no_idle_executor_ends_every_hold():
    wake, holds = Wake(4), Holds(5.0)
    waiter = idle_thread(wake)
    first, second = holds.hold(RUN), holds.hold("another-run")
    assert first is not None and second is not None
    route_wake("spawn:x", wake, holds)  # the idle executor takes it: holds go on
    assert not first.event.is_set() and not second.event.is_set()
    waiter.join(timeout=10)
    route_wake("spawn:y", wake, holds)  # nobody idle: the held runs park and make room
    assert first.event.is_set() and second.event.is_set()
    # Ended holds are forgotten: their runs' done notifications wake an executor.
    route_wake(f"step.done:{RUN}", wake, holds)
    assert wake.idle() < 0


def test_a_hold_that_times_out_is_released():
    holds = Holds(0.01)
    hold = holds.hold(RUN)
    assert hold is not None and hold.wait() is False
    holds.release(RUN)
    assert holds.deliver(RUN) is False


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_no_hold_when_holds_are_off(seconds):
    assert Holds(seconds).hold(RUN) is None
