"""A recipe's env can never pass Threadline's own variables, libpq's, or a webhook's secret."""

from __future__ import annotations

import pytest

from engine_adapter.recipes.recipes import RecipeError, load_recipe_text


def errors_of(text: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text)
    return info.value.errors


@pytest.mark.parametrize(
    "name",
    [
        "THREADLINE_DATABASE_URL",
        "THREADLINE_COOKIE_SECRET",
        "threadline_home",
        "PGPASSWORD",
        "PGSERVICEFILE",
    ],
)
def test_threadline_and_libpq_variables_are_refused(name):
    errors = errors_of(
        f"slug: x\nenv: [API_TOKEN, {name}]\nsteps:\n  - {{id: a, run_command: ls}}\n"
    )
    assert errors == [
        f'env[1]: "{name}" is never passed to a step: THREADLINE_* and PG* variables '
        "hold Threadline's own settings and database logins"
    ]


def test_a_webhook_secret_is_refused():
    errors = errors_of(
        "slug: x\nenv: [HOOK_KEY]\nwebhooks:\n  - {path: x, secret: 'env:HOOK_KEY'}\n"
        "steps:\n  - {id: a, run_command: ls}\n"
    )
    assert errors == [
        'env[0]: "HOOK_KEY" holds a webhook\'s secret (webhooks[].secret), which is '
        "never passed to a step"
    ]


def test_gate_self_approval_round_trips_and_the_old_key_is_read_or_refused():
    gate = "slug: x\nsteps:\n  - {{id: g, human_gate: 'ok', {extra}}}\n"
    recipe = load_recipe_text(gate.format(extra="self_approval: true"))
    assert recipe.steps[0].to_dict()["self_approval"] is True
    assert (
        "self_approval"
        not in load_recipe_text(gate.format(extra="accept: decision")).steps[0].to_dict()
    )
    assert errors_of(gate.format(extra="self_approval: yes please")) == [
        'steps[0].self_approval: "yes please" must be true or false'
    ]
    assert errors_of("slug: x\nsteps:\n  - {id: g, run_command: ls, self_approval: true}\n") == [
        "steps[0].self_approval: not allowed on a run_command step (only on human_gate)"
    ]
    # The old opt-in: `true` is every gate's default now (an older recipe still loads, and
    # refuses the initiator); `false`, or with self_approval, says what no longer exists.
    old = load_recipe_text(gate.format(extra="not_by_initiator: true")).steps[0].to_dict()
    assert "not_by_initiator" not in old and "self_approval" not in old
    for extra in ("not_by_initiator: false", "{not_by_initiator: true, self_approval: true}"):
        extra = extra.strip("{}")
        (error,) = errors_of(gate.format(extra=extra))
        assert error.startswith("steps[0].not_by_initiator:") and "self_approval: true" in error


def test_network_is_true_or_false_and_its_default_keeps_the_hash():
    plain = load_recipe_text("slug: x\nsteps:\n  - {id: a, run_command: ls}\n")
    online = load_recipe_text("slug: x\nnetwork: true\nsteps:\n  - {id: a, run_command: ls}\n")
    offline = load_recipe_text("slug: x\nnetwork: false\nsteps:\n  - {id: a, run_command: ls}\n")
    assert plain.canonical_hash == online.canonical_hash != offline.canonical_hash
    assert "network" not in plain.to_dict() and offline.to_dict()["network"] is False
    assert errors_of("slug: x\nnetwork: none\nsteps:\n  - {id: a, run_command: ls}\n") == [
        'network: "none" must be true (the default) or false (no network)'
    ]
