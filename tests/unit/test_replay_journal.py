"""The read-only context a rerun replays its original's handler with (reruns.py): it hands back
each checkpoint as the run wrote it, repeats named as Absurd names them, and says when one is
missing rather than running anything."""

from __future__ import annotations

import pytest

from engine_adapter.conductor.reruns import _Journal, _Unrecorded


def test_a_journal_hands_back_each_checkpoint_and_runs_nothing():
    journal = _Journal("r1", {"send:a:1": {"ok": True}, "x": 1, "x#2": 2, "sleep:b:1": "t"})

    def never() -> None:
        raise AssertionError("a replay runs nothing")

    assert journal.step("send:a:1", never) == {"ok": True}
    assert journal.await_event("ev", "x") == 1
    assert journal.begin_step("x").state == 2  # a repeated name is the run's second record
    journal.sleep_until("sleep:b:1", None)
    with pytest.raises(_Unrecorded, match="x#3"):
        journal.step("x", never)
    with pytest.raises(_Unrecorded, match="done:a:1"):
        journal.await_event("threadline.step.done:r1:a:1", "done:a:1")
