"""Validation never crashes: each input that used to crash, hang or pass into a later crash gets
a RecipeError naming the path; payload schemas and placeholder contexts are checked up front."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from engine_adapter.recipes.recipe_doc import MAX_CHARS
from engine_adapter.recipes.recipes import Recipe, RecipeError, load_recipe_file, load_recipe_text

STEP = "steps:\n  - id: a\n    run_command: echo hi\n"
BASE = "slug: x\n" + STEP


def laughs(levels: int = 9) -> str:
    """The ~400-byte "billion laughs": each level repeats the one before nine times."""
    doc = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels):
        prev, name = chr(96 + i), chr(97 + i)
        doc += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    return doc


def one_step(body: str) -> str:
    return "slug: x\nsteps:\n  - id: a\n" + "".join(f"    {line}\n" for line in body.split("\n"))


def json_recipe(**fields: object) -> str:
    doc = {"slug": "x", "steps": [{"id": "a", "run_command": "ls"}], **fields}
    return json.dumps(doc)


CRASHERS = {
    "billion laughs": (laughs() + BASE, "more than 20000 values"),
    "alias inside itself": (
        "slug: x\na: &a [*a]\n" + STEP,
        "alias *a is inside the value it names",
    ),
    "YAML nested 100000 deep": (
        "slug: x\nsteps: " + "[" * 100_000 + "]" * 100_000,
        "nested deeper than 64 levels",
    ),
    "YAML nested 100 deep": ("slug: x\nsteps: " + "[" * 100 + "]" * 100, "nested deeper than 64"),
    "JSON nested 100000 deep": (
        '{"slug": "x", "steps": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "nested deeper than 64 levels",
    ),
    "JSON nested 100 deep": (
        '{"slug": "x", "steps": ' + "[" * 100 + "]" * 100 + "}",
        "nested deeper than 64 levels",
    ),
    "too large": (BASE + "description: '" + "x" * MAX_CHARS + "'\n", "a recipe has at most"),
    "time zone that is a directory": (BASE + "timezone: America\n", 'timezone: "America" is not'),
    "very long time zone": (BASE + "timezone: " + "A" * 5000 + "\n", "timezone: "),
    "time zone escaping the zone directory": (BASE + "timezone: ../../etc/passwd\n", "timezone: "),
    "time zone file that is no zone": (BASE + "timezone: zone.tab\n", 'timezone: "zone.tab"'),
    "time zone with NUL": (BASE + 'timezone: "Europe/Berlin\\0"\n', "timezone: contains a NUL"),
    ".inf sleep": (one_step("sleep: .inf"), "steps[0].sleep: inf is not a finite number"),
    ".nan sleep": (one_step("sleep: .nan"), "steps[0].sleep: nan is not a finite number"),
    "10^20 day sleep": (
        one_step("sleep: 100000000000000000000d"),
        'steps[0].sleep: "100000000000000000000d" is longer than 366 days',
    ),
    "huge bare sleep": (one_step("sleep: 99999999999999999999999"), "steps[0].sleep: "),
    "long digit sleep": (one_step("sleep: '" + "1" * 100_000 + "'"), "steps[0].sleep: "),
    ".inf timeout": (one_step("run_command: ls\ntimeout: .inf"), "steps[0].timeout: inf is not"),
    "367 day timeout": (one_step("run_command: ls\ntimeout: 367d"), "longer than 366 days"),
    "10^20 day gate timeout": (
        one_step("human_gate: ok?\ntimeout: 100000000000000000000d"),
        'steps[0].timeout: "100000000000000000000d" is longer than 366',
    ),
    "timeout rounding to zero": (
        one_step("run_command: ls\ntimeout: 0.0001s"),
        'steps[0].timeout: "0.0001s" must be positive',
    ),
    "sleep_until in year 9999 west of UTC": (
        one_step("sleep_until: '9999-12-31T23:59:59-12:00'"),
        "steps[0].sleep_until: ",
    ),
    "sleep_until in year 3000": (
        one_step("sleep_until: 3000-01-01T00:00:00Z"),
        "is more than 366 days ahead",
    ),
    "sleep_until past year 9999": (
        one_step("sleep_until: '10000-01-01T00:00:00Z'"),
        "steps[0].sleep_until: ",
    ),
    "max_concurrent_runs 2^31": (
        BASE + "max_concurrent_runs: 2147483648\n",
        "max_concurrent_runs: 2147483648 must be an integer from 1 to 10000",
    ),
    "NUL in YAML": (BASE + 'description: "a\\0b"\n', "description: contains a NUL character"),
    "NUL in JSON": (json_recipe(description="a\u0000b"), "description: contains a NUL character"),
    "NUL in a command": (
        json_recipe(steps=[{"id": "a", "run_command": "echo \u0000"}]),
        "steps[0].run_command: contains a NUL",
    ),
    "NUL in a key": (
        json_recipe(payload_schema={"properties": {"a\u0000": {}}}),
        "payload_schema.properties: key",
    ),
    "lone surrogate in JSON": (
        '{"slug": "x", "description": "\\ud800", "steps": []}',
        "description: contains a lone surrogate",
    ),
    "lone surrogate in a key": ('{"slug": "x", "\\udfff": 1, "steps": []}', 'key "\\udfff"'),
    "lone surrogate in YAML": (BASE + 'description: "\\ud800"\n', "description"),
    "lone surrogate in the text": (BASE + "description: \ud800\n", "not valid YAML/JSON"),
    "integer key": (BASE + "1: x\n", "top level: key 1 must be a string"),
    "boolean key": (
        BASE + "payload_schema:\n  properties:\n    on: {type: string}\n",
        "payload_schema.properties: key true must be a string",
    ),
    "mapping key": (one_step("run_command: ls\n{1: 2}: 3"), "unhashable key"),
    "null key in JSON-like YAML": (BASE + "description: {null: 1}\n", "key null must be a string"),
    "huge integer": (BASE + "max_concurrent_runs: " + "9" * 5000 + "\n", "not valid YAML/JSON"),
    "huge integer in JSON": ('{"slug": "x", "n": ' + "9" * 5000 + "}", "not valid YAML/JSON"),
    "large integer": (json_recipe(max_concurrent_runs=10**30), "max_concurrent_runs: the integer"),
    "large integer in a step": (
        json_recipe(steps=[{"id": "a", "sleep": 10**4000}]),
        "steps[0].sleep: the integer is too large",
    ),
    "impossible date": (BASE + "description: 2026-13-45\n", "month must be in 1..12"),
    "YAML set": (BASE + "description: !!set {a, b}\n", "description: a set value is not allowed"),
    "YAML binary": (BASE + "description: !!binary aGk=\n", "description: a bytes value"),
    "YAML python object": (BASE + "d: !!python/object:os.system {}\n", "not valid YAML/JSON"),
    "many braces": (one_step("run_command: '" + "{{" * 60_000 + "'"), "unclosed"),
    "placeholder of spaces": (one_step("run_command: '{{" + " " * 100_000 + "'"), "unclosed"),
    "huge list index": (one_step("run_command: echo {{payload.l.99999999999999999999}}"), None),
    "many keys": (json_recipe(description={f"k{i}": 1 for i in range(21_000)}), "more than 20000"),
    "webhook index digits": (
        BASE + "webhooks:\n  - path: p\n    map: {x: '$.a[" + "9" * 5000 + "]'}\n",
        "webhooks[0].map.x: ",
    ),
    "cron of 100000 characters": (
        BASE + "schedule: '" + "1," * 50_000 + "1 * * * *'\n",
        "schedule: ",
    ),
    "not text": (None, "a recipe is text"),
}


@pytest.mark.parametrize("name", list(CRASHERS))
def test_each_crashing_input_gets_a_path_naming_error(name):
    text, message = CRASHERS[name]
    try:
        load_recipe_text(text)  # type: ignore[arg-type]
    except RecipeError as err:
        assert err.errors and all(isinstance(e, str) for e in err.errors)
        if message is not None:
            assert any(message in e for e in err.errors), err.errors
    else:
        assert message is None, "validated, but should have been refused"


def test_a_recipe_file_is_read_only_up_to_the_bound(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(BASE + "description: '" + "x" * (4 * MAX_CHARS) + "'\n")
    with pytest.raises(RecipeError, match="a recipe has at most"):
        load_recipe_file(big)


def test_aliases_within_the_bounds_still_work():
    recipe = load_recipe_text(
        "slug: x\nsteps:\n  - &step {id: a, run_command: ls, retries: 2}\n  - {<<: *step, id: b}\n"
    )
    assert [(s.id, s.retries) for s in recipe.steps] == [("a", 2), ("b", 2)]


def test_durations_are_bounded_by_366_days():
    assert load_recipe_text(one_step("sleep: 366d")).steps[0].text == "366d"
    assert (
        load_recipe_text(one_step("human_gate: ok?\ntimeout: 8784h")).steps[0].timeout_s
        == 366 * 86400
    )
    soon = (datetime.now(UTC) + timedelta(days=300)).isoformat()
    assert load_recipe_text(one_step(f"sleep_until: '{soon}'")).steps[0].text == soon
    assert load_recipe_text(one_step("sleep_until: '0001-01-01T00:00:00Z'")).steps  # past: at once


@pytest.mark.parametrize(
    "command, message",
    [
        ("echo '{{payload.x}}'", "{{payload.x}} is inside single quotes"),
        ("echo $'{{payload.x}}'", "{{payload.x}} is inside $'…'"),
        ("cat <<'EOF'\n{{payload.x}}\nEOF", "{{payload.x}} is in the body of a quoted heredoc"),
        ('cat <<"EOF"\n{{payload.x}}\nEOF', "{{payload.x}} is in the body of a quoted heredoc"),
        ("echo $(( {{payload.x}} * 2 ))", "{{payload.x}} is inside arithmetic"),
        ("echo \\{{payload.x}}", "{{payload.x}} follows a backslash"),
    ],
)
def test_a_placeholder_where_a_variable_cannot_expand_is_refused_with_its_path(command, message):
    doc = {
        "slug": "x",
        "steps": [
            {"id": "ok", "run_command": "echo {{payload.x}}"},
            {"id": "a", "run_command": command},
        ],
    }
    with pytest.raises(RecipeError) as err:
        load_recipe_text(json.dumps(doc))
    assert err.value.errors == [
        f"steps[1].run_command: {message}" + err.value.errors[0].split(message, 1)[1]
    ]


def test_placeholders_in_text_steps_are_not_shell_checked():
    recipe = load_recipe_text(
        "slug: x\nsteps:\n  - id: a\n    dispatch_task: \"say '{{payload.x}}'\"\n"
        "  - id: b\n    human_gate: \"'{{payload.x}}'?\"\n"
    )
    assert len(recipe.steps) == 2


PYTEST_TARGET = """
slug: checks
payload_schema:
  type: object
  properties:
    target: {type: string, pattern: "^[^-]"}
    mode: {enum: [fast, full]}
  required: [target]
steps:
  - id: checks
    run_command: pytest -q {{payload.target}}
"""


def test_payload_schema_is_part_of_the_canonical_recipe():
    recipe = load_recipe_text(PYTEST_TARGET)
    assert recipe.to_dict()["payload_schema"]["properties"]["target"]["pattern"] == "^[^-]"
    again = Recipe.from_dict(json.loads(json.dumps(recipe.to_dict())))
    assert again == recipe and again.canonical_hash == recipe.canonical_hash
    looser = load_recipe_text(PYTEST_TARGET.replace('"^[^-]"', '"^.*$"'))
    assert looser.canonical_hash != recipe.canonical_hash
    without = load_recipe_text(
        PYTEST_TARGET.split("payload_schema:")[0] + "steps:\n  - id: checks\n"
        "    run_command: pytest -q {{payload.target}}\n"
    )
    assert "payload_schema" not in without.to_dict()


@pytest.mark.parametrize(
    "schema, message",
    [
        ("payload_schema: [1]", "payload_schema: must be a JSON Schema object"),
        (
            "payload_schema:\n  properties:\n    target: {pattern: '(['}",
            "payload_schema.properties.target.pattern: '([' is not a 'regex'",
        ),
        (
            "payload_schema:\n  properties:\n    target: {pattern: 5}",
            "payload_schema.properties.target.pattern: 5 is not of type 'string'",
        ),
        ("payload_schema: {type: objekt}", "payload_schema.type: "),
        ("payload_schema: {const: 2026-01-01}", "payload_schema.const: 2026-01-01 is a YAML date"),
        (
            "payload_schema: {$ref: 'https://example.com/s.json'}",
            'payload_schema.$ref: "https://example.com/s.json" '
            "must be a reference inside the schema",
        ),
        (
            "payload_schema: {$ref: '#/$defs/nope'}",
            'payload_schema.$ref: "#/$defs/nope" refers to nothing',
        ),
        (
            "schedule: '0 7 * * *'\npayload_schema: {required: [target]}",
            "payload_schema: a scheduled run's payload is {}, "
            "and payload: 'target' is a required property",
        ),
    ],
)
def test_a_bad_payload_schema_is_refused_with_its_path(schema, message):
    with pytest.raises(RecipeError) as err:
        load_recipe_text(BASE + schema + "\n")
    assert any(e.startswith(message) for e in err.value.errors), err.value.errors


def test_local_references_resolve():
    recipe = load_recipe_text(
        BASE + "payload_schema:\n  $defs: {t: {type: string}}\n"
        "  properties: {target: {$ref: '#/$defs/t'}}\n"
    )
    assert recipe.payload_schema["properties"]["target"] == {"$ref": "#/$defs/t"}


def test_the_console_template_is_valid():
    from console.recipes_page import NEW_RECIPE

    recipe = load_recipe_text(NEW_RECIPE)
    assert recipe.payload_schema and recipe.steps[0].kind == "run_command"
