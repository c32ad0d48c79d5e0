"""A payload value never runs as code through bash's name-taking builtins or its arithmetic
(issue 22, finding 17).

A placeholder reaches a command as a quoted variable reference, but some builtins and keywords
take a word, once expanded, as a variable name or arithmetic: `[[ -v "$X" ]]` with X =
`a[$(touch MARK)]` runs `touch MARK` as bash evaluates the subscript. The validator (the recipe
loader, `threadline recipe validate`, and render_command again before a step runs) refuses a
placeholder in each such position, naming the step, the placeholder and the construct; each
refused construct below is first shown to run a value as code in real bash when let through.
Hypothesis then builds commands from every construct the validator accepts, with hostile values,
and runs them in real bash: no value ever runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_adapter.recipes import shell_context
from engine_adapter.recipes.recipes import PLACEHOLDER, Recipe, RecipeError
from engine_adapter.recipes.render import RenderError, render_command, variable_names

# Every one runs `touch "$MARKDIR/MARK"` if bash evaluates it as code, a name or arithmetic.
TOUCH = 'touch "$MARKDIR/MARK"'
SUBSCRIPT = f"a[$({TOUCH})]"
HOSTILE = [
    SUBSCRIPT,
    f"$({TOUCH})",
    f"`{TOUCH}`",
    f"([0]=$({TOUCH}))",
    f"x; {TOUCH}",
    f"'\"; {TOUCH}; \"'",
    f"1 + {SUBSCRIPT}",
    f"x\nEOF\n{TOUCH}\ncat <<EOF",
    "-v",
    "!",
    "(",
    "=",
    "-eq",
    "--",
]

# (command, what the error names, a payload that runs code when the check is bypassed or None
# where the refusal is a precaution: a position no single value is known to exploit)
REFUSED = [
    ("[[ -v {{payload.x}} ]]", "the operand of `-v` in `[[ … ]]`", {"x": SUBSCRIPT}),
    ("[[ -R {{payload.x}} ]]", "the operand of `-R` in `[[ … ]]`", None),
    ("test -v {{payload.x}}", "the operand of `-v` in `test`", {"x": SUBSCRIPT}),
    ("[ -v {{payload.x}} ]", "the operand of `-v` in `[`", {"x": SUBSCRIPT}),
    ("[ ! -v {{payload.x}} ]", "the operand of `-v` in `[`", {"x": SUBSCRIPT}),
    ("printf -v {{payload.x}} y", "the variable name of `printf -v`", {"x": SUBSCRIPT}),
    (
        "printf {{payload.y}} {{payload.x}} y",
        "an option of `printf`",
        {"y": "-v", "x": SUBSCRIPT},
    ),
    ("read {{payload.x}} <<< y", "`read`, which takes variable names", {"x": SUBSCRIPT}),
    ("read -a {{payload.x}} <<< y", "`read`, which takes variable names", None),
    ("a=(1); mapfile {{payload.x}} < /dev/null", "`mapfile`", None),
    ("readarray {{payload.x}} < /dev/null", "`readarray`", None),
    ("a=(1); unset {{payload.x}}", "`unset`, which takes variable names", {"x": SUBSCRIPT}),
    ("getopts ab {{payload.x}}", "`getopts`, which takes variable names", None),
    ("sleep 0 & wait -p {{payload.x}}", "`wait`, which takes variable names", None),
    ("typeset {{payload.x}}=1", "`typeset`, which takes variable names", {"x": SUBSCRIPT}),
    ("x=(1); declare x={{payload.x}}", "`declare`", {"x": f"([0]=$({TOUCH}))"}),
    ("f() { local x={{payload.x}}; }; f", "`local`", None),
    ("export X={{payload.x}}", "`export`", None),
    ("readonly X={{payload.x}}", "`readonly`", None),
    ("let {{payload.x}}", "`let`, which evaluates it as arithmetic", {"x": SUBSCRIPT}),
    ("(( {{payload.x}} ))", "arithmetic", {"x": SUBSCRIPT}),
    ("echo $(( {{payload.x}} + 1 ))", "arithmetic", {"x": SUBSCRIPT}),
    ("echo $[ {{payload.x}} ]", "arithmetic", {"x": SUBSCRIPT}),
    ("a[{{payload.x}}]=1", "arithmetic", {"x": SUBSCRIPT}),
    ('a=(1); echo "${a[{{payload.x}}]}"', "arithmetic", {"x": SUBSCRIPT}),
    ("x=([{{payload.x}}]=1)", "arithmetic", {"x": f"$({TOUCH})"}),
    ('s=abc; echo "${s:{{payload.x}}}"', "arithmetic", {"x": SUBSCRIPT}),
    ("for ((i = 0; i < {{payload.x}}; i++)); do :; done", "arithmetic", {"x": SUBSCRIPT}),
    ("[[ {{payload.x}} -eq 1 ]]", "an operand of `-eq` in [[ … ]]", {"x": SUBSCRIPT}),
    ("[[ 1 -lt {{payload.x}} ]]", "an operand of `-lt` in [[ … ]]", {"x": SUBSCRIPT}),
    (
        "[[ $(echo {{payload.x}}) -ge 1 ]]",
        "a $(…) whose output an operand of `-ge`",
        {"x": SUBSCRIPT},
    ),
    ("echo $(( $(echo {{payload.x}}) ))", "whose output bash evaluates as arithmetic", None),
    (
        'printf -v "$(printf %s {{payload.x}})" y',
        "a $(…) whose output the variable name of `printf -v`",
        {"x": SUBSCRIPT},
    ),
    (
        '"$(echo {{payload.x}})" {{payload.y}}',
        "a $(…) whose output part of the command's name",
        {"x": "eval", "y": TOUCH},
    ),
    (
        "test {{payload.y}} {{payload.x}}",
        "a `test` whose operators are not all literal",
        {"y": "-v", "x": SUBSCRIPT},
    ),
    (
        "[ {{payload.y}} {{payload.x}} ]",
        "a `[` whose operators are not all literal",
        {"y": "-v", "x": SUBSCRIPT},
    ),
    (
        "[ -n {{payload.y}} -a -v {{payload.x}} ]",
        "a `[` whose operators are not all literal",
        {"y": "a", "x": SUBSCRIPT},
    ),
    ("echo hi >& {{payload.x}}", "the target of `>&`", {"x": f"$({TOUCH})"}),
    ("echo hi 2>&{{payload.x}}", "the target of `>&`", None),
    ("cat <& {{payload.x}}", "the target of `<&`", None),
    ("eval {{payload.x}}", "`eval`, which runs it as code", {"x": TOUCH}),
    ("trap {{payload.x}} EXIT", "`trap`, which runs it as code", {"x": TOUCH}),
    ("source {{payload.x}}", "`source`, which runs it as code", None),
    ("compgen -W {{payload.x}}", "`compgen`, which runs it as code", {"x": f"$({TOUCH})"}),
    (
        "mapfile -C {{payload.x}} -c 1 l <<< y",
        "`mapfile`, which takes variable names",
        {"x": TOUCH + ";:"},
    ),
    ("{{payload.x}} {{payload.y}}", "the command's name", {"x": "eval", "y": TOUCH}),
    ("run-{{payload.x}} now", "the command's name", None),
    ("exec {{payload.x}}", "the command's name", None),
    ("command {{payload.x}} {{payload.y}}", "the command's name", {"x": "eval", "y": TOUCH}),
    ("$CMD {{payload.x}}", "whose name is not a literal word", None),
    ("bash -c {{payload.x}}", "the script or an option of `bash`", {"x": TOUCH}),
    ('sh -c "echo {{payload.x}}"', "the script or an option of `sh`", {"x": f"$({TOUCH})"}),
    ("/bin/bash {{payload.x}} {{payload.y}}", "`/bin/bash`", {"x": "-c", "y": TOUCH}),
    ("set {{payload.x}}", "an option of `set`", None),
    (
        'f() { printf -v "$1" y; }; f {{payload.x}}',
        "a function defined in this command",
        {"x": SUBSCRIPT},
    ),
    ("PS4={{payload.x}}; set -x; true", "assigned to PS4", {"x": f"$({TOUCH})"}),
    ("RANDOM={{payload.x}}", "assigned to RANDOM", {"x": SUBSCRIPT}),
    (": ${RANDOM:={{payload.x}}}", "assigned to RANDOM", None),
    ("printf -v RANDOM %s {{payload.x}}", "assigned to RANDOM", {"x": SUBSCRIPT}),
    ("for RANDOM in {{payload.x}}; do :; done", "assigned to RANDOM", {"x": SUBSCRIPT}),
    ("BASH_ENV={{payload.x}} bash -c true", "assigned to BASH_ENV", None),
    ("PATH={{payload.x}} ls", "assigned to PATH", None),
    ("declare -i n; n={{payload.x}}", "declare integer or nameref", {"x": SUBSCRIPT}),
    (
        "declare -n r; r={{payload.x}}; echo $r",
        "declare integer or nameref",
        {"x": SUBSCRIPT},
    ),
    ('echo "${!{{payload.x}}}"', "names the variable of a ${…}", None),
    (
        "echo `echo \\$(printf -v {{payload.x}} y)`",
        "inside `…`, which bash parses again",
        {"x": SUBSCRIPT},
    ),
    (
        "shopt -s expand_aliases; alias p='printf -v'\np {{payload.x}} y",
        "turns alias expansion on",
        {"x": SUBSCRIPT},
    ),
]


def recipe(command: str) -> dict:
    return {
        "slug": "placeholders",
        "steps": [
            {"id": "first", "run_command": "echo ok"},
            {"id": "risky", "run_command": command},
        ],
    }


def unchecked(command: str, payload: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The command as render_command would make it without the construct rules: the same
    references, by quoting context alone."""
    matches = list(PLACEHOLDER.finditer(command))
    places = shell_context.placements(command, [m.span() for m in matches])
    names = variable_names([m.group(1).strip() for m in matches])
    out, last, values = [], 0, {}
    for match, place in zip(matches, places, strict=True):
        path = match.group(1).strip()
        name = names[path]
        values[name] = payload[path.removeprefix("payload.")]
        reference = f'"${name}"' if place.context == shell_context.BARE else f"${{{name}}}"
        out += [command[last : match.start()], reference]
        last = match.end()
    return "".join([*out, command[last:]]), values


def bash(command: str, values: dict[str, str], where: Path) -> None:
    """Runs command in a directory of its own; MARK appears in `where` if a value ran."""
    cwd = where / "cwd"
    cwd.mkdir(exist_ok=True)
    subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={"PATH": os.environ["PATH"], "MARKDIR": str(where), **values},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=20,
        check=False,
    )


@pytest.mark.parametrize("command, construct, exploit", REFUSED)
def test_a_placeholder_where_bash_evaluates_it_is_refused(command, construct, exploit, tmp_path):
    if exploit is not None:  # the hole is real: let through, the value runs
        bash(*unchecked(command, exploit), tmp_path)
        assert (tmp_path / "MARK").exists(), "the construct no longer runs the value"
    with pytest.raises(RecipeError) as refused:
        Recipe.from_dict(recipe(command))
    errors = [e for e in refused.value.errors if e.startswith("steps[1].run_command: {{payload.")]
    assert errors and any(construct in e for e in errors), refused.value.errors
    # A recipe stored before the rule existed fails its step before anything runs.
    payload = {"x": "a", "y": "b"}
    with pytest.raises(RenderError, match=r"\{\{payload\.[xy]\}\} "):
        render_command(command, payload, {})


def test_recipe_validate_names_the_step_the_placeholder_and_the_construct(tmp_path):
    path = tmp_path / "probe.yaml"
    path.write_text(json.dumps(recipe("[[ -v {{payload.target}} ]] && echo set")))
    done = subprocess.run(
        [sys.executable, "-m", "engine_adapter.cli", "recipe", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 10, done
    assert (
        "steps[1].run_command: {{payload.target}} is the operand of `-v` in `[[ … ]]`, a "
        "variable name bash evaluates"
    ) in done.stdout + done.stderr


# Every construct the validator accepts, each with {P} where a placeholder goes.
ACCEPTED = [
    "echo {P}",
    "echo -e {P} {P}",
    "echo a{P}b '{' {P}*",
    'echo "a {P} b" "${u:-{P}}" ${u:-{P}} ${u:+{P}} "${u/x/{P}}"',
    "printf '%s\\n' {P} {P}",
    "printf -- {P} {P}",
    "printf %d {P}",
    "printf '%(%s)T|%q|%b' {P} {P} {P}",
    "printf -v out %s {P}",
    "/bin/echo {P}",
    "true {P}; : {P}",
    "env true {P}",
    "exit {P}",
    "type {P}",
    "command -v {P}",
    'set -- {P} {P}; echo "$@"',
    'x={P}; echo "$x"',
    "x={P} y={P} true",
    'x=({P} {P}); x+=({P}); echo "${x[@]}"',
    'for i in {P} {P}; do echo "$i"; done',
    "select s in {P}; do break; done",
    "case {P} in {P}) echo m;; (*) echo n;; esac",
    "[[ {P} == {P} ]]",
    "[[ -n {P} && {P} != x || -z {P} ]]",
    "[[ {P} =~ {P} ]]",
    "[[ {P} =~ ^a(b|{P})$ ]]",
    "[[ {P} < {P} ]]",
    "[[ ! ( -f {P} ) ]]",
    "test {P}",
    "test -n {P}",
    "[ {P} = {P} ]",
    "[ {P} -eq 1 ]",
    "[ {P} -lt {P} ]",
    "[ ! {P} = x ]",
    "[ ! -z {P} ]",
    "[ {P} -a {P} ]",
    "[ {P} -nt {P} ]",
    "test ! {P}",
    "cat <<< {P}",
    "echo x > {P}; cat < {P}",
    "echo x 2> {P} &> {P} >> {P}",
    "echo x >&2 2>&1 {P}",
    "cat <<EOF\n{P} $(echo {P})\nEOF",
    "cat <<-EOF\n\t{P}\n\tEOF",
    'echo "$(echo {P})" `echo {P}`',
    "cat <(echo {P}); echo {P} > >(cat -- {P})",
    "bash -c 'echo \"$1\"' _ {P}",
    "sh -e -c 'printf %s \"$1\"' sh {P}",
    "exec echo {P}",
    "builtin echo {P}",
    "command echo {P}",
    "echo {P} | cat",
    "echo {P} && echo {P} || echo {P}",
    "! echo {P}",
    "time echo {P}",
    "{ echo {P}; }",
    "( echo {P} )",
    "if [[ -n {P} ]]; then echo {P}; elif true; then :; else echo {P}; fi",
    "while false; do echo {P}; done",
    "f() { echo hi; }; f; echo {P}",
    "echo {P} # {P}\ntrue",
    "echo {P} | xargs echo",
]
SEPARATORS = ["; ", " && ", " || ", "\n", " | "]
WRAPPERS = ["{}", 'echo "$( {} )"', "{{ {}; }}", "( {} )", "if true; then {}; fi", "x=$( {} )"]


@st.composite
def commands(draw: st.DrawFn, constructs: list[str]) -> str:
    parts = draw(st.lists(st.sampled_from(constructs), min_size=1, max_size=3))
    text = parts[0]
    for part in parts[1:]:
        text += draw(st.sampled_from(SEPARATORS)) + part
    text = draw(st.sampled_from(WRAPPERS)).format(text)
    paths = st.sampled_from(["{{payload.a}}", "{{payload.b}}"])
    while "{P}" in text:
        text = text.replace("{P}", draw(paths), 1)
    return text


VALUES = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(st.sampled_from(list("a[]$()`'\"\\;-v !=(\n*{},")), max_size=12).map(
        lambda t: t + SUBSCRIPT
    ),
)
PROPERTY = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def runs_nothing(command: str, a: str, b: str, where: Path) -> None:
    rendered = render_command(command, {"a": a, "b": b}, {})
    bash(rendered.text, rendered.values, where)
    assert not (where / "MARK").exists(), (command, a, b)


@PROPERTY
@given(commands(ACCEPTED), VALUES, VALUES)
def test_no_value_runs_in_any_accepted_construct(tmp_path_factory, command, a, b):
    Recipe.from_dict(recipe(command))  # accepted: each construct is one the validator takes
    runs_nothing(command, a, b, tmp_path_factory.mktemp("accepted"))


@PROPERTY
@given(commands(ACCEPTED + [c for c, _, _ in REFUSED]), VALUES, VALUES)
def test_whatever_the_validator_accepts_runs_no_value(tmp_path_factory, command, a, b):
    command = command.replace("{{payload.x}}", "{{payload.a}}").replace(
        "{{payload.y}}", "{{payload.b}}"
    )
    try:
        Recipe.from_dict(recipe(command))
    except RecipeError:
        return
    runs_nothing(command, a, b, tmp_path_factory.mktemp("mixed"))


def test_a_deeply_nested_command_with_many_placeholders_is_checked_in_linear_time():
    # Each placeholder once walked every frame around it: this took minutes.
    text = 'printf -v "$(' * 20_000 + "{{payload.x}}" * 5_000
    spans = [m.span() for m in PLACEHOLDER.finditer(text)]
    started = time.monotonic()
    found = shell_context.placements(text, spans)
    assert time.monotonic() - started < 20
    assert all(p.refusal for p in found)
    assert "command's name" in found[0].refusal and len(found[-1].refusal) < 200
