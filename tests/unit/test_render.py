from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_adapter.model.names import split_step_key, step_key
from engine_adapter.recipes.render import MAX_VALUE_BYTES, RenderError, render, render_command

# Each would run `touch PWNED` if the shell parsed the value as code in some quoting context.
ATTACKS = [
    "$(touch PWNED)",
    ";touch PWNED",
    "`touch PWNED`",
    "'\"; touch PWNED; \"'",
    '"; touch PWNED; echo "',
    "x\nEOF\ntouch PWNED\ncat <<EOF",
    "a  b * ~ \\n $HOME",
]

# Each context writes the value to out.txt: (command, what out.txt must then hold).
CONTEXTS = {
    "bare": ("printf %s {{payload.x}} > out.txt", "{v}"),
    "double quotes": ('printf %s "{{payload.x}}" > out.txt', "{v}"),
    "inside a double-quoted word": ('printf %s "<{{payload.x}}>" > out.txt', "<{v}>"),
    "heredoc": ("cat > out.txt <<EOF\n{{payload.x}}\nEOF", "{v}\n"),
    "heredoc with <<-": ("cat > out.txt <<-END\n\t[{{payload.x}}]\n\tEND", "[{v}]\n"),
    "$(…)": ('printf %s "$(printf %s {{payload.x}})" > out.txt', "{v}"),
    "$(…) in quotes": ('printf %s "$(printf %s "{{payload.x}}")" > out.txt', "{v}"),
    "backticks": ('printf %s "`printf %s {{payload.x}}`" > out.txt', "{v}"),
    "backticks unquoted": ('x=`printf %s {{payload.x}}`; printf %s "$x" > out.txt', "{v}"),
    "${…} default": ('printf %s "${UNSET:-{{payload.x}}}" > out.txt', "{v}"),
    "assignment": ('x={{payload.x}}; printf %s "$x" > out.txt', "{v}"),
}


def run_bash(command: str, env: dict[str, str], cwd: Path) -> None:
    subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={"PATH": os.environ["PATH"], **env},
        check=True,
        timeout=10,
    )


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("context", list(CONTEXTS))
def test_no_quoting_context_runs_a_value(context, attack, tmp_path):
    text, expected = CONTEXTS[context]
    command = render_command(text, {"x": attack}, {})
    assert attack not in command.text  # the command references the value, never holds it
    run_bash(command.text, command.values, tmp_path)
    assert not (tmp_path / "PWNED").exists()
    assert (tmp_path / "out.txt").read_text() == expected.format(v=attack)


def test_references_are_quoted_by_context_and_named_after_the_path():
    command = render_command(
        'a {{payload.target}} "b {{ payload.target }}" {{steps.build-x.output}}',
        {"target": "t"},
        {"build-x": "out\n"},
    )
    assert (
        command.text == 'a "$TL_PAYLOAD_TARGET" "b ${TL_PAYLOAD_TARGET}" "$TL_STEPS_BUILD_X_OUTPUT"'
    )
    assert command.values == {"TL_PAYLOAD_TARGET": "t", "TL_STEPS_BUILD_X_OUTPUT": "out"}


def test_paths_mapping_to_one_name_get_distinct_names():
    command = render_command(
        "echo {{payload.a-b}} {{payload.a_b}} {{payload.a-b}} {{payload.a_b_2}}",
        {"a-b": 1, "a_b": 2, "a_b_2": 3},
        {},
    )
    assert (
        command.text
        == 'echo "$TL_PAYLOAD_A_B" "$TL_PAYLOAD_A_B_2" "$TL_PAYLOAD_A_B" "$TL_PAYLOAD_A_B_2_2"'
    )
    assert command.values == {
        "TL_PAYLOAD_A_B": "1",
        "TL_PAYLOAD_A_B_2": "2",
        "TL_PAYLOAD_A_B_2_2": "3",
    }


@pytest.mark.parametrize(
    "text, where",
    [
        ("echo '{{payload.x}}'", "single quotes"),
        ("echo $'{{payload.x}}'", "$'…'"),
        ("cat <<'EOF'\n{{payload.x}}\nEOF", "quoted heredoc"),
        ('cat <<"EOF"\n{{payload.x}}\nEOF', "quoted heredoc"),
        ("echo $(( {{payload.x}} + 1 ))", "arithmetic"),
        ("a[{{payload.x}}]=1", "arithmetic"),
        ('echo "${s:{{payload.x}}}"', "arithmetic"),
        ("echo \\{{payload.x}}", "backslash"),
    ],
)
def test_a_reference_that_would_not_expand_is_refused(text, where):
    with pytest.raises(RenderError, match=r"\{\{payload\.x\}\} .*" + where.replace("$", r"\$")):
        render_command(text, {"x": "v"}, {})


def test_values_that_no_environment_holds_fail_with_a_message():
    with pytest.raises(RenderError, match=r"payload.big\}\}: the value is 200000 bytes.*at most"):
        render_command("echo {{payload.big}}", {"big": "x" * 200_000}, {})
    render_command("echo {{payload.big}}", {"big": "x" * (MAX_VALUE_BYTES - 100)}, {})
    many = {f"k{i}": "x" * 100_000 for i in range(12)}
    with pytest.raises(RenderError, match="a step's environment takes at most"):
        render_command("echo " + " ".join(f"{{{{payload.k{i}}}}}" for i in range(12)), many, {})
    with pytest.raises(RenderError, match="NUL"):
        render_command("echo {{payload.x}}", {"x": "a\0b"}, {})


def test_text_values_are_not_quoted_and_structures_become_json():
    out = render(
        "{{ payload.x }} / {{payload.list.1}} / {{payload.obj}}",
        {"x": "plain", "list": [1, 2], "obj": {"k": 1}},
        {},
    )
    assert out == 'plain / 2 / {"k": 1}'
    command = render_command("echo {{payload.obj}}", {"obj": {"k": [1, "é"]}}, {})
    assert command.values == {"TL_PAYLOAD_OBJ": '{"k": [1, "é"]}'}


def test_step_outputs():
    assert render("got {{steps.a.output}}", {}, {"a": "42"}) == "got 42"
    # trailing newlines go, as in the shell's $(...); inner ones stay
    assert render("[{{steps.a.output}}]", {}, {"a": "a\nb\n\n"}) == "[a\nb]"


@pytest.mark.parametrize(
    "text, message",
    [
        ("{{payload.missing}}", "payload.missing is not in the payload"),
        ("{{payload.a.b}}", "payload.a.b is not in the payload"),
        ("{{payload.l.99999999999999999999}}", "is not in the payload"),
        ("{{steps.later.output}}", "step later has no output yet"),
        ("{{env.HOME}}", "unknown placeholder"),
    ],
)
def test_unresolved_paths_are_named(text, message):
    with pytest.raises(RenderError, match=message):
        render_command("echo " + text, {"a": {"c": 1}, "l": [1]}, {})
    with pytest.raises(RenderError, match=message):
        render(text, {"a": {"c": 1}, "l": [1]}, {})


def test_step_keys_round_trip():
    key = step_key("0190-abc", "build-x", 3)
    assert key == "0190-abc:build-x:3"
    assert split_step_key(key) == ("0190-abc", "build-x", 3)


SHELL_TOKENS = [
    "echo ",
    "printf %s ",
    '"',
    "'",
    "$(",
    ")",
    "`",
    "${Y:-",
    "}",
    "<<EOF\n",
    "\nEOF\n",
    "<<'EOF'\n",
    "{{payload.x}}",
    " ",
    ";",
    "\n",
    "#",
    "\\",
    "case a in a) ",
    ";; esac",
    "((",
    "))",
    "$((",
    "a[",
    "]",
    "${Z:",
    "$'",
]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(SHELL_TOKENS), max_size=25).map("".join),
    st.sampled_from([*ATTACKS, "a[$(touch PWNED)]"]),
)
def test_whatever_the_command_a_value_never_runs(tmp_path_factory, text, attack):
    try:
        command = render_command(text, {"x": attack}, {})
    except RenderError:
        return  # refused: a reference could not stand there
    cwd = tmp_path_factory.mktemp("cmd")
    # Random text is often no valid bash (check=False): all that matters is that nothing ran.
    subprocess.run(
        ["bash", "-c", command.text],
        cwd=cwd,
        capture_output=True,
        timeout=10,
        check=False,
        stdin=subprocess.DEVNULL,
        env={"PATH": os.environ["PATH"], **command.values},
    )
    assert not (cwd / "PWNED").exists(), command.text
