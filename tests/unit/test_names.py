"""Checkpoint, key and event names: built and parsed in one place, round trip exactly."""

from __future__ import annotations

import pytest

from engine_adapter.model import names


@pytest.mark.parametrize(
    "kind, path, try_no, branch",
    [
        (names.SEND, "check", 1, None),
        (names.DONE, "each[12]/deploy", 3, None),
        (names.DONE, "fan", 2, "left"),
        (names.SPAWN, "outer[2]/inner[3]/x", 1, "run"),
        (names.DECIDE, "triage", 1, None),
        (names.CARRIED, "fetch", None, None),
        (names.WINNER, "race", 1, "losers"),
    ],
)
def test_checkpoint_names_round_trip(kind, path, try_no, branch):
    name = names.checkpoint(kind, path, try_no, branch)
    assert names.parse_checkpoint(name) == (kind, path, try_no, branch)


@pytest.mark.parametrize("name", ["admitted", "finish", "send", "send:x:one", "nope:x:1", ""])
def test_other_names_are_not_ours(name):
    assert names.parse_checkpoint(name) is None


def test_step_keys_and_paths():
    key = names.step_key("01a2-run", "each[2]/deploy", 4)
    assert names.split_step_key(key) == ("01a2-run", "each[2]/deploy", 4)
    assert names.step_id_of("each[2]/deploy") == "deploy"
    assert names.step_id_of("poll[3]") == "poll"
    assert names.child_path("", "a") == "a" and names.child_path("x[1]", "a") == "x[1]/a"
    assert names.iteration_path("poll", 3) == "poll[3]"


def test_short_run_ids_tell_runs_of_one_minute_apart():
    same_minute = ["01a20a4c-1f9b-7454-9c22-2632934ef779", "01a20a4c-1f9b-7454-9c22-2632934ef780"]
    assert len({names.short_run_id(r) for r in same_minute}) == 2
