"""A run's snapshot's steps are parsed once per process for each distinct snapshot: the
conductor replays a run at every claim, and parsing the steps was a sixth of its CPU."""

from __future__ import annotations

import json

from engine_adapter.conductor import handler_base
from engine_adapter.conductor.handler_base import INVALID, snapshot_steps

STEPS = [
    {"id": "a", "run_command": 'echo "{{payload.name}}"'},
    {"id": "b", "dispatch_task": "look at it"},
]


def test_a_snapshot_seen_again_is_not_parsed_again():
    first = snapshot_steps(json.loads(json.dumps(STEPS)))  # as each claim's params bring it
    before = handler_base._parsed_steps.cache_info()
    again = snapshot_steps(json.loads(json.dumps(STEPS)))
    after = handler_base._parsed_steps.cache_info()
    assert again is first
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    assert [s.id for s in first] == ["a", "b"]
    assert first[0].text == 'echo "{{payload.name}}"'


def test_another_snapshot_gets_its_own_steps():
    changed = [dict(STEPS[0], run_command="echo other"), STEPS[1]]
    assert snapshot_steps(changed)[0].text == "echo other"
    assert snapshot_steps(STEPS)[0].text == 'echo "{{payload.name}}"'


def test_a_step_that_no_longer_validates_still_fails_when_reached():
    (step,) = snapshot_steps([{"id": "x", "run_command": "true", "timeout": "100000000000000d"}])
    assert step.kind == INVALID and step.id == "x"
