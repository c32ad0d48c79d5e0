from __future__ import annotations

import pytest

from engine_adapter.names import split_step_key, step_key
from engine_adapter.render import RenderError, render


def test_command_values_are_shell_quoted():
    out = render("echo {{payload.who}}", {"who": "a'b; rm -rf /"}, {}, shell=True)
    assert out == "echo 'a'\"'\"'b; rm -rf /'"


def test_text_values_are_not_quoted_and_structures_become_json():
    out = render("{{ payload.x }} / {{payload.list.1}} / {{payload.obj}}",
                 {"x": "plain", "list": [1, 2], "obj": {"k": 1}}, {}, shell=False)
    assert out == 'plain / 2 / {"k": 1}'


def test_step_outputs():
    assert render("got {{steps.a.output}}", {}, {"a": "42"}, shell=False) == "got 42"
    # trailing newlines go, as in the shell's $(...); inner ones stay
    assert render("[{{steps.a.output}}]", {}, {"a": "a\nb\n\n"}, shell=False) == "[a\nb]"


@pytest.mark.parametrize("text, message", [
    ("{{payload.missing}}", "payload.missing is not in the payload"),
    ("{{payload.a.b}}", "payload.a.b is not in the payload"),
    ("{{steps.later.output}}", "step later has no output yet"),
    ("{{env.HOME}}", "unknown placeholder"),
])
def test_unresolved_paths_are_named(text, message):
    with pytest.raises(RenderError, match=message):
        render(text, {"a": {"c": 1}}, {}, shell=True)


def test_step_keys_round_trip():
    key = step_key("0190-abc", "build-x", 3)
    assert key == "0190-abc:build-x:3"
    assert split_step_key(key) == ("0190-abc", "build-x", 3)
