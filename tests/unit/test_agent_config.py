"""Agent bot files, a dispatch_task's tools, and the file tools' confinement: no database."""

from __future__ import annotations

import pytest

from engine_adapter.bots.agent_tools import (
    Call,
    ToolError,
    parse_arguments,
    read_file_command,
    relative_path,
    write_file_command,
)
from engine_adapter.catalog.bot_config import BotConfig, parse_bots
from engine_adapter.recipes.recipes import RecipeError, Step, load_recipe_text


def errors_of(doc: object) -> list[str]:
    with pytest.raises(RecipeError) as info:
        parse_bots(doc, "bots.yaml")
    return info.value.errors


def test_a_bot_file_with_defaults():
    [bot] = parse_bots({"helper": {"base_url": "http://127.0.0.1:8080/v1", "model": "m"}})
    assert bot == BotConfig("helper", "http://127.0.0.1:8080/v1", "m")
    assert bot.temperature == 0.0 and bot.max_turns == 20 and bot.api_key_env is None
    [bot] = parse_bots({"x": {"base_url": "https://a/v1", "model": "m", "api_key": "env:KEY"}})
    assert bot.api_key_env == "KEY"


def test_bot_file_errors_name_their_path():
    assert errors_of([]) == ["bots.yaml: must map bot names to their settings"]
    errors = errors_of(
        {
            "Bad Name": {},
            "ok": {
                "base_url": "ftp://x",
                "temperature": 3,
                "max_turns": 0,
                "max_tokens": "lots",
                "colour": "red",
            },
        }
    )
    assert errors == [
        'Bad Name: bot name "Bad Name" must match [a-z0-9_-]{1,64}',
        "ok.colour: unknown field (known: base_url, model, api_key, temperature, max_tokens, "
        "max_turns, max_tokens_per_run)",
        "ok.model: required, a non-empty string",
        'ok.base_url: "ftp://x" must be an http(s) URL',
        "ok.temperature: 3 must be a number from 0 to 2",
        'ok.max_tokens: "lots" must be an integer from 1 to 1000000',
        "ok.max_turns: 0 must be an integer from 1 to 1000",
    ]


def test_a_literal_api_key_is_refused_and_never_echoed():
    errors = errors_of({"b": {"base_url": "http://h/v1", "model": "m", "api_key": "sk-secret"}})
    assert len(errors) == 1 and errors[0].startswith("b.api_key: must be env:NAME")
    assert "sk-secret" not in errors[0]


RECIPE = """
slug: tools
steps:
  - id: think
    dispatch_task: do it
    tools: {tools}
"""


def test_dispatch_task_tools_are_validated_and_kept():
    recipe = load_recipe_text(RECIPE.format(tools="[run_command, write_file]"))
    step = recipe.steps[0]
    assert step.tools == ("run_command", "write_file")
    assert Step.from_dict(step.to_dict()).tools == step.tools
    with pytest.raises(RecipeError) as info:
        load_recipe_text(RECIPE.format(tools="[run_command, ask_god, run_command]"))
    assert info.value.errors == [
        'steps[0].tools[1]: "ask_god" is not a tool (known: run_command, read_file, write_file, '
        "ask_human, start_workflow, propose_change)",
        'steps[0].tools[2]: "run_command" is listed twice',
    ]
    with pytest.raises(RecipeError) as info:
        load_recipe_text(
            "slug: t\nsteps:\n  - id: s\n    run_command: 'true'\n    tools: [read_file]\n"
        )
    assert "steps[0].tools: not allowed on a run_command step" in info.value.errors[0]


def test_start_workflow_needs_the_workflows_it_may_start():
    recipe = load_recipe_text(
        RECIPE.format(tools="[start_workflow, ask_human]") + "    workflows: [probe, fix-it]\n"
    )
    assert recipe.steps[0].workflows == ("probe", "fix-it")
    assert Step.from_dict(recipe.steps[0].to_dict()).workflows == ("probe", "fix-it")
    cases = {
        "[start_workflow]": "steps[0].workflows: the start_workflow tool needs a list of workflows",
        "[ask_human]\n    workflows: [probe]": (
            "steps[0].workflows: only applies with the start_workflow tool"
        ),
        "[start_workflow]\n    workflows: [Probe, x, x]": (
            'steps[0].workflows[0]: "Probe" must be a workflow slug ([a-z0-9-]+)'
        ),
        "[start_workflow]\n    workflows: []": (
            "steps[0].workflows: [] must be a non-empty list of workflow slugs"
        ),
    }
    for tools, error in cases.items():
        with pytest.raises(RecipeError) as info:
            load_recipe_text(RECIPE.format(tools=tools))
        assert info.value.errors[0] == error, tools
    with pytest.raises(RecipeError) as info:
        load_recipe_text(RECIPE.format(tools="[start_workflow]\n    workflows: [x, x]"))
    assert info.value.errors == ['steps[0].workflows[1]: "x" is listed twice']


def test_recipes_without_tools_keep_their_canonical_form():
    recipe = load_recipe_text("slug: t\nsteps:\n  - id: s\n    dispatch_task: go\n")
    assert "tools" not in recipe.to_dict()["steps"][0]


def test_file_tool_paths_are_relative_and_become_quoted_commands():
    assert relative_path("sub/new.txt") == "sub/new.txt"
    for bad in ("/etc/passwd", "../x", "a/../../x", "", "~/x", "-rf"):
        with pytest.raises(ToolError):
            relative_path(bad)
    # Run as the step runs (its sandbox and user): never opened by the bot process itself.
    assert read_file_command("a b.txt") == "head -c 262145 -- 'a b.txt'"
    assert write_file_command("d/$(x).txt") == "mkdir -p -- d && cat > 'd/$(x).txt'"


def test_tool_arguments_are_checked():
    allowed = ("read_file",)
    assert parse_arguments(Call("1", "read_file", '{"path": "a"}'), allowed) == {"path": "a"}
    for call, why in [
        (Call("1", "run_command", '{"command": "ls"}'), "unknown tool 'run_command'"),
        (Call("1", "read_file", "[1]"), "must be a JSON object"),
        (Call("1", "read_file", '{"path": 3}'), "argument 'path' must be a string"),
        (Call("1", "read_file", '{"path": "a", "mode": "x"}'), "unknown argument 'mode'"),
        (Call("1", "finish", "{}"), "argument 'result' is required"),
    ]:
        with pytest.raises(ToolError, match=why):
            parse_arguments(call, allowed)
