"""Recipe parsing and validation: pure Python, no database."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from engine_adapter.recipes.recipes import (
    Recipe,
    RecipeError,
    Step,
    find_placeholders,
    load_recipe_file,
    load_recipe_text,
)

RECIPES = Path(__file__).resolve().parents[2] / "assets" / "recipes"

FULL = """
slug: nightly-check
name: Nightly check
description: optional text
bot: shell
schedule: "0 7 * * *"
timezone: Europe/Berlin
catch_up: latest
max_concurrent_runs: 3
workdir: /srv/app
env: [API_TOKEN]
steps:
  - id: checks
    run_command: "pytest -q {{payload.target}}"
    timeout: 10m
    retries: 2
    on_failure: continue
  - id: investigate
    dispatch_task: "Investigate and summarise:\\n{{ steps.checks.output }}"
  - id: cool-off
    sleep: 2h
  - id: wake
    sleep_until: "2026-12-01T07:00:00Z"
  - id: wake2
    sleep_until: "{{payload.wake_at}}"
  - id: approve
    human_gate: "Ship the fix? Reply 👍 to continue, 👎 to stop."
    accept: any_reply
    from: alice
    approvers: [alice]
    timeout: 24h
    on_timeout: approve
"""


def errors_of(doc: dict | str) -> list[str]:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text)
    return info.value.errors


def one_step(**step) -> dict:
    return {"slug": "t", "steps": [{"id": "s", **step}]}


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_recipes_load(path: Path) -> None:
    recipe = load_recipe_file(path)
    assert recipe.slug == path.stem
    assert recipe.steps
    assert Recipe.from_dict(recipe.to_dict()) == recipe


def test_examples_present() -> None:
    names = {p.name for p in RECIPES.glob("*.yaml")}
    assert {"hello.yaml", "nightly-check.yaml", "wait-for-reply.yaml"} <= names


def test_full_recipe_fields() -> None:
    r = load_recipe_text(FULL)
    assert (r.slug, r.name, r.bot, r.schedule, r.timezone) == (
        "nightly-check",
        "Nightly check",
        "shell",
        "0 7 * * *",
        "Europe/Berlin",
    )
    assert (r.catch_up, r.max_concurrent_runs, r.workdir, r.env) == (
        "latest",
        3,
        "/srv/app",
        ("API_TOKEN",),
    )
    checks, investigate, cool, wake, wake2, approve = r.steps
    assert (checks.kind, checks.text, checks.timeout_s, checks.retries, checks.on_failure) == (
        "run_command",
        "pytest -q {{payload.target}}",
        600.0,
        2,
        "continue",
    )
    assert investigate.kind == "dispatch_task" and investigate.on_failure == "fail"
    assert (cool.kind, cool.text, cool.timeout_s) == ("sleep", "2h", None)
    assert (wake.kind, wake.text) == ("sleep_until", "2026-12-01T07:00:00Z")
    assert wake2.text == "{{payload.wake_at}}"
    assert (approve.accept, approve.from_, approve.approvers, approve.on_timeout) == (
        "any_reply",
        "alice",
        ("alice",),
        "approve",
    )
    assert approve.timeout_s == 86400
    assert approve.to_dict()["from"] == "alice"


def test_defaults_filled() -> None:
    r = load_recipe_text(
        "slug: x\nsteps:\n  - {id: a, run_command: ls}\n  - {id: b, human_gate: 'ok?'}"
    )
    assert (r.name, r.bot, r.timezone, r.env, r.description) == ("x", "shell", "UTC", (), None)
    d = r.to_dict()
    assert d == {
        "slug": "x",
        "name": "x",
        "bot": "shell",
        "timezone": "UTC",
        "steps": [
            {"id": "a", "run_command": "ls", "retries": 0, "on_failure": "fail"},
            {"id": "b", "human_gate": "ok?", "accept": "decision", "on_timeout": "deny"},
        ],
    }


def test_unquoted_yaml_timestamp_is_accepted() -> None:
    r = load_recipe_text("slug: x\nsteps:\n  - id: w\n    sleep_until: 2026-12-01T07:00:00Z\n")
    assert r.steps[0].text.startswith("2026-12-01T07:00:00")
    assert Recipe.from_dict(r.to_dict()) == r


def test_hash_stable_across_form() -> None:
    yaml_text = "slug: x\nsteps:\n  - id: a\n    run_command: ls\n    timeout: 10m\n"
    json_text = json.dumps(
        {"steps": [{"timeout": 600, "run_command": "ls", "id": "a"}], "slug": "x"}, indent="\t"
    )
    explicit = (
        "slug: x\nname: x\nbot: shell\ntimezone: UTC\nenv: []\nsteps:\n"
        "  - {id: a, run_command: ls, timeout: 600s, retries: 0, on_failure: fail}\n"
    )
    hashes = {load_recipe_text(t).canonical_hash for t in (yaml_text, json_text, explicit)}
    assert len(hashes) == 1
    changed = load_recipe_text(yaml_text.replace("ls", "ls -l")).canonical_hash
    assert changed not in hashes
    assert load_recipe_text(yaml_text.replace("10m", "11m")).canonical_hash not in hashes
    assert len(next(iter(hashes))) == 64


def test_scheduled_recipe_hash_leaves_the_default_catch_up_out() -> None:
    """A scheduled recipe stored before catch_up existed must keep its hash: re-applying the
    unchanged file is no new version. The canonical document is exactly what it was then."""
    text = 'slug: x\nschedule: "0 7 * * *"\nsteps:\n  - id: a\n    sleep: 1s\n'
    before_catch_up = {
        "slug": "x",
        "name": "x",
        "bot": "shell",
        "schedule": "0 7 * * *",
        "timezone": "UTC",
        "steps": [{"id": "a", "sleep": "1s"}],
    }
    blob = json.dumps(before_catch_up, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    recipe = load_recipe_text(text)
    assert recipe.to_dict() == before_catch_up and recipe.catch_up == "latest"
    assert recipe.canonical_hash == hashlib.sha256(blob.encode()).hexdigest()
    # Writing the default out changes nothing; another policy is part of the document.
    assert load_recipe_text(text + "catch_up: latest\n").canonical_hash == recipe.canonical_hash
    other = load_recipe_text(text + "catch_up: all\n")
    assert other.to_dict()["catch_up"] == "all" and other.canonical_hash != recipe.canonical_hash
    assert Recipe.from_dict(recipe.to_dict()) == recipe


def test_round_trip() -> None:
    r = load_recipe_text(FULL)
    assert Recipe.from_dict(r.to_dict()) == r
    assert Recipe.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    for step in r.steps:
        assert Step.from_dict(json.loads(json.dumps(step.to_dict()))) == step


def test_missing_and_bad_top_level() -> None:
    errs = errors_of({"name": 5, "foo": 1, "bot": "Big Bot"})
    assert "foo: unknown field" in errs
    assert "slug: required" in errs
    assert "name: 5 must be a string" in errs
    assert 'bot: "Big Bot" must match [a-z0-9_-]+' in errs
    assert "steps: required" in errs
    assert errors_of({"slug": "Bad_Slug", "steps": []}) == [
        'slug: "Bad_Slug" must match [a-z0-9-]+ (1 to 64 characters)',
        "steps: must be a non-empty list of steps",
    ]
    assert errors_of({"slug": "a" * 65, "steps": [{"id": "a", "sleep": "1s"}]})[0].startswith(
        "slug: "
    )


def test_top_level_must_be_mapping() -> None:
    assert errors_of("- a\n- b\n") == [
        '<recipe>: top level must be a mapping of fields, got ["a", "b"]'
    ]


def test_invalid_yaml_names_source_and_line() -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe_text("slug: x\nsteps: [\n", source="r.yaml")
    msg = str(info.value)
    assert msg.startswith("r.yaml: not valid YAML/JSON: ") and "line " in msg
    assert "duplicate key" in errors_of("slug: a\nslug: b\nsteps: []\n")[0]


def test_missing_file_names_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(RecipeError) as info:
        load_recipe_file(missing)
    assert str(missing) in str(info.value)


def test_timezone_schedule_and_options() -> None:
    errs = errors_of(
        {
            "slug": "x",
            "timezone": "Mars/Olympus",
            "schedule": "0 7 * *",
            "catch_up": "some",
            "max_concurrent_runs": 0,
            "workdir": "build/../../srv",
            "steps": [{"id": "a", "run_command": "ls"}],
        }
    )
    assert errs == [
        'schedule: "0 7 * *" must be a 5-field cron expression',
        'timezone: "Mars/Olympus" is not an IANA time zone (e.g. Europe/Berlin)',
        'catch_up: "some" must be one of latest, all, none',
        "max_concurrent_runs: 0 must be an integer from 1 to 10000",
        'workdir: "build/../../srv" must not hold a ".." component (a relative workdir lies '
        "inside the run's own directory; an absolute one inside a directory of "
        "THREADLINE_WORKDIRS)",
    ]
    errs = errors_of({"slug": "x", "schedule": "0 7 * * 9", "steps": [{"id": "a", "sleep": 1}]})
    assert errs[0].startswith('schedule: "0 7 * * 9" is not a valid cron expression')


def test_a_workdir_is_relative_to_the_run_or_absolute_never_climbing() -> None:
    def doc(workdir: object) -> dict:
        return {"slug": "x", "workdir": workdir, "steps": [{"id": "a", "sleep": "1s"}]}

    def workdir_errors(value: object) -> list[str]:
        return errors_of(doc(value))

    for fine in ("build", "./out/logs", ".", "/srv/app", "/srv/app/"):
        assert load_recipe_text(json.dumps(doc(fine))).workdir == fine
    for bad in ("..", "../other-run", "a/../../b", "/srv/app/../../root", "a/.."):
        assert workdir_errors(bad) == [
            f'workdir: "{bad}" must not hold a ".." component (a relative workdir lies inside '
            "the run's own directory; an absolute one inside a directory of THREADLINE_WORKDIRS)"
        ]
    assert workdir_errors("  ")[0].startswith('workdir: "  " must name a directory')
    assert workdir_errors(5) == ["workdir: 5 must be a string"]


def test_env_names() -> None:
    errs = errors_of(
        {
            "slug": "x",
            "env": ["OK_1", "1BAD", "has-dash", "OK_1"],
            "steps": [{"id": "a", "sleep": "1s"}],
        }
    )
    assert errs == [
        'env[1]: "1BAD" must match [A-Za-z_][A-Za-z0-9_]*',
        'env[2]: "has-dash" must match [A-Za-z_][A-Za-z0-9_]*',
        'env[3]: "OK_1" is listed twice',
    ]
    assert errors_of({"slug": "x", "env": "TOKEN", "steps": [{"id": "a", "sleep": "1s"}]}) == [
        'env: "TOKEN" must be a list of variable names'
    ]


def test_step_errors_collected_at_once() -> None:
    errs = errors_of(
        {
            "slug": "x",
            "steps": [
                {"id": "build", "run_command": "make"},
                {"id": "build", "run_command": "make"},
                {"id": "Bad Id", "run_command": "ls", "timeout": "10x"},
                {"id": "nothing"},
                {"id": "both", "run_command": "ls", "sleep": "1s"},
                "not a mapping",
            ],
        }
    )
    assert errs == [
        'steps[1].id: "build" is used by steps[0] too',
        'steps[2].id: "Bad Id" must match [a-z0-9_-]+',
        'steps[2].timeout: "10x" is not a duration',
        "steps[3]: needs exactly one of run_command, dispatch_task, sleep, sleep_until, "
        "human_gate, wait_for_event, workflow, parallel, foreach, repeat, or if/then/else "
        "(found none)",
        "steps[4]: needs exactly one of run_command, dispatch_task, sleep, sleep_until, "
        "human_gate, wait_for_event, workflow, parallel, foreach, repeat, or if/then/else (found "
        "run_command, sleep)",
        'steps[5]: must be a mapping, got "not a mapping"',
    ]


def test_a_misspelt_key_is_told_the_key_it_is_close_to() -> None:
    errs = errors_of(one_step(run_comand="ls", retires=2))
    assert errs == [
        "steps[0]: needs exactly one of run_command, dispatch_task, sleep, sleep_until, "
        "human_gate, wait_for_event, workflow, parallel, foreach, repeat, or if/then/else "
        "(found none; did you mean run_command, not run_comand?)",
        "steps[0].run_comand: unknown field; did you mean run_command?",
        "steps[0].retires: unknown field; did you mean retries?",
    ]
    assert "stpes: unknown field; did you mean steps?" in errors_of({"slug": "t", "stpes": []})
    assert errors_of(one_step(run_command="ls", zzz=1)) == ["steps[0].zzz: unknown field"]


def test_step_unknown_and_misplaced_keys() -> None:
    errs = errors_of(one_step(run_command="ls", accept="decision", bogus=1))
    assert errs == [
        "steps[0].accept: not allowed on a run_command step (only on human_gate)",
        "steps[0].bogus: unknown field",
    ]
    errs = errors_of(one_step(sleep="1s", timeout="1m", retries=1))
    assert (
        "steps[0].timeout: not allowed on a sleep step "
        "(only on run_command, dispatch_task, human_gate, wait_for_event)" in errs
    )
    assert (
        "steps[0].retries: not allowed on a sleep step (only on run_command, dispatch_task)" in errs
    )
    assert errors_of(one_step(human_gate="ok?", on_failure="continue")) == [
        "steps[0].on_failure: not allowed on a human_gate step (only on run_command, "
        "dispatch_task, workflow, parallel, foreach)"
    ]


def test_step_value_errors() -> None:
    assert errors_of(one_step(sleep="soon")) == ['steps[0].sleep: "soon" is not a duration']
    assert errors_of(one_step(run_command="  ")) == [
        'steps[0].run_command: must be a non-empty string, got "  "'
    ]
    assert errors_of(one_step(run_command="ls", timeout="0s")) == [
        'steps[0].timeout: "0s" must be positive'
    ]
    assert errors_of(one_step(run_command="ls", retries=11, on_failure="retry")) == [
        "steps[0].retries: 11 must be an integer from 0 to 10",
        'steps[0].on_failure: "retry" must be one of fail, continue',
    ]
    assert errors_of(
        one_step(human_gate="ok?", accept="maybe", on_timeout="continue", approvers="alice")
    ) == [
        'steps[0].accept: "maybe" must be one of decision, any_reply',
        'steps[0].on_timeout: "continue" must be one of deny, approve',
        'steps[0].approvers: "alice" must be a list of names',
    ]
    assert errors_of(one_step(human_gate="ok?", **{"from": "alice"})) == [
        "steps[0].from: only applies with accept: any_reply"
    ]
    assert errors_of(one_step(sleep_until="2026-12-01T07:00:00")) == [
        'steps[0].sleep_until: "2026-12-01T07:00:00" has no timezone (add Z or +hh:mm)'
    ]
    assert errors_of(one_step(sleep_until="tomorrow"))[0].startswith(
        'steps[0].sleep_until: "tomorrow" is not an ISO-8601 timestamp'
    )
    assert load_recipe_text(json.dumps(one_step(run_command="ls"))).steps[0].id == "s"


def test_placeholders() -> None:
    assert find_placeholders("a {{payload.x.y}} b {{ steps.c.output }}") == [
        "payload.x.y",
        "steps.c.output",
    ]
    errs = errors_of(
        {
            "slug": "x",
            "steps": [
                {
                    "id": "first",
                    "run_command": "echo {{steps.later.output}} {{steps.first.output}}",
                },
                {
                    "id": "second",
                    "dispatch_task": "{{ steps.nope.output }} {{env.HOME}} {{steps.first}}",
                },
                {"id": "later", "human_gate": "ok {{payload.q}} {{steps.first.output}} {{ payload"},
            ],
        }
    )
    assert errs == [
        "steps[0].run_command: {{steps.later.output}} refers to no earlier step",
        "steps[0].run_command: {{steps.first.output}} refers to no earlier step",
        "steps[1].dispatch_task: {{steps.nope.output}} refers to no earlier step",
        "steps[1].dispatch_task: {{env.HOME}} is not a known placeholder "
        "(use {{payload.<key>}}, {{steps.<id>.output}}, {{outputs.<name>}}, or {{item}} "
        "inside a foreach)",
        "steps[1].dispatch_task: {{steps.first}} is not a known placeholder "
        "(use {{payload.<key>}}, {{steps.<id>.output}}, {{outputs.<name>}}, or {{item}} "
        "inside a foreach)",
        'steps[2].human_gate: has an unclosed "{{"',
    ]
