"""Control-flow recipes: what validates, its canonical form, and what is refused with the path."""

from __future__ import annotations

import pytest

from engine_adapter.recipes.recipes import Recipe, RecipeError, load_recipe_text, sub_workflows


def errors_of(text: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text)
    return info.value.errors


GOOD = """
slug: good
outputs:
  result: steps.fan.output
steps:
  - id: checks
    run_command: make check
    on_failure: continue
  - id: investigate
    if: steps.checks.status == "failed"
    dispatch_task: "Why? {{steps.checks.output}}"
    output: why
  - id: route
    if: payload.env == "prod"
    then:
      - id: careful
        run_command: echo careful
    else:
      - id: quick
        run_command: echo quick
  - id: fan
    parallel:
      a:
        - id: a1
          run_command: echo {{steps.checks.output}}
      b:
        - id: b1
          run_command: echo b
    completion: any
  - id: each
    foreach: payload.targets
    max_parallel: 4
    steps:
      - id: deploy
        run_command: deploy {{item}} {{index}}
  - id: poll
    repeat:
      - id: probe
        run_command: curl -s example.test
    until: steps.probe.exit_code == 0
    max_iterations: 10
  - id: child
    workflow: other
    payload:
      target: "{{payload.env}}"
  - id: last
    run_command: echo "{{outputs.why}} {{steps.a1.output}}"
"""


def test_every_construct_validates_and_round_trips():
    recipe = load_recipe_text(GOOD)
    doc = recipe.to_dict()
    again = Recipe.from_dict(doc)
    assert again.to_dict() == doc and again.canonical_hash == recipe.canonical_hash
    kinds = [s.kind for s in recipe.steps]
    assert kinds == [
        "run_command",
        "dispatch_task",
        "conditional",
        "parallel",
        "foreach",
        "repeat",
        "workflow",
        "run_command",
    ]
    assert doc["steps"][4]["max_items"] == 100  # the default bound, written down
    assert doc["steps"][3]["completion"] == "any"
    assert sub_workflows(doc) == [("steps[6].workflow", "other")]


def test_a_plain_recipe_keeps_its_canonical_form():
    """Recipes without control flow hash as before: no new keys appear in their canonical form."""
    doc = load_recipe_text("slug: plain\nsteps:\n  - id: a\n    run_command: echo hi\n").to_dict()
    assert doc == {
        "slug": "plain",
        "name": "plain",
        "bot": "shell",
        "timezone": "UTC",
        "steps": [{"id": "a", "run_command": "echo hi", "retries": 0, "on_failure": "fail"}],
    }


LS = "run_command: ls"
BAD = [
    ("- {id: a, loop: [x]}", "steps[0].loop: unknown field"),
    ("- {id: a, if: 'payload.x ==', %s}" % LS, "steps[0].if: 'payload.x ==' does not parse"),
    ("- {id: a, if: \"open('x')\", %s}" % LS, "only these functions may be called"),
    (
        "- {id: a, if: steps.b.status == 'failed', %s}\n- {id: b, %s}" % (LS, LS),
        "steps[0].if: steps.b refers to no earlier step",
    ),
    ("- {id: a, if: nothing, %s}" % LS, "steps[0].if: 'nothing' is not known"),
    (
        "- {id: a, repeat: [{id: b, %s}], until: true}" % LS,
        "steps[0].max_iterations: required (a loop must be bounded)",
    ),
    ("- {id: a, repeat: [{id: b, %s}], max_iterations: 3}" % LS, "steps[0].until: required"),
    (
        "- {id: a, foreach: payload.xs, max_items: 100000, steps: [{id: b, %s}]}" % LS,
        "steps[0].max_items: 100000 must be an integer from 1 to 10000",
    ),
    ("- {id: a, then: [{id: b, %s}]}" % LS, "steps[0].if: required with then/else"),
    ("- {id: a, run_command: 'echo {{item}}'}", "{{item}} exists only inside a foreach or repeat"),
    (
        "- {id: a, parallel: {x: [{id: b, %s}], y: [{id: b, %s}]}}" % (LS, LS),
        'steps[0].parallel.y[0].id: "b" is used by steps[0].parallel.x[0] too',
    ),
    (
        "- {id: a, parallel: {x: [{id: b, %s}],\n"
        "                    y: [{id: c, run_command: 'echo {{steps.b.output}}'}]}}" % LS,
        "steps[0].parallel.y[0].run_command: {{steps.b.output}} refers to no earlier step",
    ),
    (
        "- {id: a, parallel: {x: [{id: b, %s}]}, completion: any, max_parallel: 2}" % LS,
        "steps[0].max_parallel: only with completion: all",
    ),
    ("- {id: a, workflow: Not A Slug}", "steps[0].workflow:"),
    (
        "- {id: a, %s, output: x}\n- {id: b, %s, output: x}" % (LS, LS),
        'steps[1].output: "x" is named by steps[0] too',
    ),
]


@pytest.mark.parametrize("steps, error", BAD)
def test_bad_control_flow_is_refused_with_the_path(steps, error):
    errors = errors_of("slug: bad\nsteps:\n" + steps)
    assert any(error in e for e in errors), errors


def test_outputs_refer_to_steps():
    errors = errors_of(
        "slug: bad\noutputs:\n  x: steps.nope.output\nsteps:\n  - id: a\n    run_command: ls\n"
    )
    assert errors == ["outputs.x: steps.nope refers to no earlier step"]


def test_then_and_else_may_name_the_same_output():
    load_recipe_text(
        "slug: ok\nsteps:\n- {id: a, if: true, then: [{id: b, %s, output: x}],\n"
        "   else: [{id: c, %s, output: x}]}" % (LS, LS)
    )


def test_retry_on_and_backoff_are_checked_and_kept():
    from engine_adapter.model import domain
    from engine_adapter.recipes.recipes import Step, load_recipe_text

    text = (
        "slug: r\nsteps:\n  - id: s\n    run_command: ./deploy\n    retries: 3\n"
        "    retry_on: [75, timeout]\n    backoff: {initial: 2s, max: 30s}\n"
    )
    step = load_recipe_text(text).steps[0]
    assert step.retry_on == (75, "timeout") and step.backoff == (2.0, 30.0)
    assert Step.from_dict(step.to_dict()) == step
    policy = domain.RetryPolicy(step.retry_on, *step.backoff)
    assert policy.retries(75, False) and policy.retries(None, True)
    assert not policy.retries(3, False)
    assert [policy.wait_s(n) for n in range(5)] == [2, 4, 8, 16, 30]
    assert domain.RetryPolicy().retries(3, False)  # no retry_on: every failure
    for bad, says in (
        ("retry_on: [0]", "retry_on[0]: 0 is not one of exit codes 1-255, failure, timeout"),
        ("retry_on: []", "retry_on: [] must be a non-empty list"),
        ("backoff: {initial: 1m, max: 1s}", "backoff: initial must be positive and at most max"),
        ("backoff: {first: 1s}", "must be a mapping with initial and max"),
    ):
        with pytest.raises(RecipeError) as info:
            load_recipe_text(f"slug: r\nsteps:\n  - id: s\n    run_command: x\n    {bad}\n")
        assert says in info.value.errors[0], bad
    plain = load_recipe_text("slug: r\nsteps:\n  - id: s\n    run_command: x\n")
    assert "retry_on" not in plain.to_dict()["steps"][0]  # older recipes keep their hashes
