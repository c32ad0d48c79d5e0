"""A recipe's env can never pass Threadline's own variables, libpq's, or a webhook's secret."""

from __future__ import annotations

import pytest

from engine_adapter.recipes import RecipeError, load_recipe_text


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


def test_gate_not_by_initiator_round_trips():
    recipe = load_recipe_text(
        "slug: x\nsteps:\n  - {id: g, human_gate: 'ok', not_by_initiator: true}\n"
    )
    assert recipe.steps[0].to_dict()["not_by_initiator"] is True
    assert errors_of(
        "slug: x\nsteps:\n  - {id: g, human_gate: 'ok', not_by_initiator: yes please}\n"
    ) == ['steps[0].not_by_initiator: "yes please" must be true or false']
    assert errors_of("slug: x\nsteps:\n  - {id: g, run_command: ls, not_by_initiator: true}\n") == [
        "steps[0].not_by_initiator: not allowed on a run_command step (only on human_gate)"
    ]


def test_network_is_true_or_false_and_its_default_keeps_the_hash():
    plain = load_recipe_text("slug: x\nsteps:\n  - {id: a, run_command: ls}\n")
    online = load_recipe_text("slug: x\nnetwork: true\nsteps:\n  - {id: a, run_command: ls}\n")
    offline = load_recipe_text("slug: x\nnetwork: false\nsteps:\n  - {id: a, run_command: ls}\n")
    assert plain.canonical_hash == online.canonical_hash != offline.canonical_hash
    assert "network" not in plain.to_dict() and offline.to_dict()["network"] is False
    assert errors_of("slug: x\nnetwork: none\nsteps:\n  - {id: a, run_command: ls}\n") == [
        'network: "none" must be true (the default) or false (no network)'
    ]
