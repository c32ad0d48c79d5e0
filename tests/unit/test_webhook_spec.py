"""A recipe's webhooks: validation naming the path of each problem, and body-to-payload mapping."""

from __future__ import annotations

import pytest

from engine_adapter.recipes.recipes import Recipe, RecipeError, load_recipe_text
from engine_adapter.recipes.webhook_spec import MappingError, map_payload, resolve, secret_env

STEPS = "steps:\n  - id: s\n    run_command: echo {{payload.pr}}\n"


def recipe(webhooks: str) -> Recipe:
    return load_recipe_text(f"slug: pr\n{webhooks}\n{STEPS}")


def errors(webhooks: str) -> list[str]:
    with pytest.raises(RecipeError) as caught:
        recipe(webhooks)
    return caught.value.errors


def test_webhooks_round_trip_in_the_canonical_form():
    r = recipe(
        "webhooks:\n  - path: github/pr\n    secret: env:GH_SECRET\n"
        "    map: {pr: $.pull_request.number, first: '$.commits[0].id'}\n  - path: plain"
    )
    assert r.to_dict()["webhooks"] == [
        {
            "path": "github/pr",
            "secret": "env:GH_SECRET",
            "map": {"pr": "$.pull_request.number", "first": "$.commits[0].id"},
        },
        {"path": "plain"},
    ]
    assert Recipe.from_dict(r.to_dict()) == r
    assert secret_env(r.webhooks[0].secret) == "GH_SECRET"


def test_a_recipe_without_webhooks_keeps_its_hash():
    # Adding the field must not change the canonical form (and hash) of existing recipes.
    r = load_recipe_text(f"slug: pr\n{STEPS}")
    assert "webhooks" not in r.to_dict()
    assert r.canonical_hash == recipe("webhooks: []").canonical_hash


@pytest.mark.parametrize(
    "webhooks, expected",
    [
        ("webhooks: github", 'webhooks: "github" must be a list of webhook triggers'),
        ("webhooks: [github]", "webhooks[0]: must be a mapping with a path"),
        ("webhooks:\n  - secret: env:X", "webhooks[0].path: required"),
        ("webhooks:\n  - path: /github", 'webhooks[0].path: "/github" must be like "github"'),
        ("webhooks:\n  - path: a/../b", 'webhooks[0].path: "a/../b" must be like'),
        ("webhooks:\n  - path: 'a b'", 'webhooks[0].path: "a b" must be like'),
        ("webhooks:\n  - path: x\n  - path: x", 'webhooks[1].path: "x" is used by webhooks[0] too'),
        ("webhooks:\n  - path: x\n    token: 1", "webhooks[0].token: unknown field"),
        ("webhooks:\n  - path: x\n    secret: env:1BAD", "webhooks[0].secret: must be env:NAME"),
        ("webhooks:\n  - path: x\n    map: [a]", "webhooks[0].map: must be a mapping"),
        (
            "webhooks:\n  - path: x\n    map: {pr: pull_request.number}",
            'webhooks[0].map.pr: "pull_request.number" must be an expression like $, $.a.b',
        ),
        (
            "webhooks:\n  - path: x\n    map: {'a.b': $.x}",
            'webhooks[0].map: field "a.b" must match',
        ),
    ],
)
def test_each_problem_names_its_path(webhooks, expected):
    found = errors(webhooks)
    assert any(e.startswith(expected) for e in found), found


def test_a_literal_secret_is_refused_without_being_echoed():
    found = errors("webhooks:\n  - path: x\n    secret: hunter2")
    assert found == [
        "webhooks[0].secret: must be env:NAME, naming the environment variable of "
        "`threadline hooks` that holds the secret (secrets are not stored in "
        "recipes), got a literal"
    ]


def test_expressions_resolve_and_name_where_they_stop():
    body = {"pull_request": {"number": 42, "labels": [{"name": "bug"}]}, "n": None}
    assert resolve(body, "$") is body
    assert resolve(body, "$.pull_request.number") == 42
    assert resolve(body, "$.pull_request.labels[0].name") == "bug"
    assert resolve(body, "$.n") is None  # present but null is a value
    with pytest.raises(MappingError, match=r'\$.pull_request has no key "title"'):
        resolve(body, "$.pull_request.title")
    with pytest.raises(MappingError, match=r"\$.pull_request.labels has no item \[3\]"):
        resolve(body, "$.pull_request.labels[3]")
    with pytest.raises(MappingError, match=r'\$.pull_request.number has no key "x"'):
        resolve(body, "$.pull_request.number.x")


def test_payload_is_the_body_or_the_mapped_fields():
    assert map_payload({"a": 1}, None) == {"a": 1}
    mapped = map_payload({"pull_request": {"number": 7}}, {"pr": "$.pull_request.number"})
    assert mapped == {"pr": 7}
    assert map_payload([1, 2], {"first": "$[0]", "all": "$"}) == {"first": 1, "all": [1, 2]}
    with pytest.raises(MappingError, match="the body must be a JSON object, got list"):
        map_payload([1], None)
    with pytest.raises(MappingError, match=r"map.pr: \$.pull_request.number finds nothing"):
        map_payload({}, {"pr": "$.pull_request.number"})
