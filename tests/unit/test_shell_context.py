"""Where a placeholder sits in bash's quoting (shell_context.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_adapter.recipes.recipes import PLACEHOLDER
from engine_adapter.recipes.shell_context import contexts


def where(text: str) -> list[str]:
    return contexts(text, [m.span() for m in PLACEHOLDER.finditer(text)])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("echo {{x}}", ["bare"]),
        ('echo "a {{x}} b"', ["double"]),
        ("echo 'a {{x}}'", ["single"]),
        ("echo $'a {{x}}'", ["ansi"]),
        ('echo $"a {{x}}"', ["double"]),
        ("echo 'a'{{x}}'b'", ["bare"]),
        ('echo "it\'s {{x}}"', ["double"]),  # a ' inside "…" opens nothing
        ('echo "a" \'{{x}}\' "{{y}}"', ["single", "double"]),
        # quoting starts afresh inside $(…) and backticks
        ('echo "$(echo {{x}})"', ["bare"]),
        ("echo \"$(echo '{{x}}')\"", ["single"]),
        ('echo "`echo {{x}}`"', ["bare"]),
        ('echo `echo "{{x}}"`', ["double"]),
        ("echo $(echo $(echo '{{x}}') {{y}})", ["single", "bare"]),
        ('echo ${X:-{{x}}} "${X:-{{y}}}"', ["bare", "double"]),
        # heredocs: bodies end at the delimiter line; quoted delimiters do not expand
        ("cat <<EOF\nhi {{x}}\nEOF\necho {{y}}", ["heredoc", "bare"]),
        ("cat <<'EOF'\nhi {{x}}\nEOF\necho {{y}}", ["quoted_heredoc", "bare"]),
        ('cat <<"EOF"\n{{x}}\nEOF', ["quoted_heredoc"]),
        ("cat <<\\EOF\n{{x}}\nEOF", ["quoted_heredoc"]),
        ("cat <<E'O'F\n{{x}}\nEOF", ["quoted_heredoc"]),
        ('cat <<"A" && cat <<B\n{{x}}\nA\n{{y}}\nB\n{{z}}', ["quoted_heredoc", "heredoc", "bare"]),
        ("cat <<-EOF\n\t{{x}}\n\tEOF\n{{y}}", ["heredoc", "bare"]),
        ("cat <<EOF\n'{{x}}' \"{{y}}\"\nEOF", ["heredoc", "heredoc"]),  # quotes are text in a body
        ('x="$(cat <<EOF\n{{x}}\nEOF\n)" {{y}}', ["heredoc", "bare"]),
        ("cat <<< {{x}}", ["bare"]),
        ("cat <<EOF\n{{x}}", ["heredoc"]),  # no end line: the body runs to the end
        ("cat <<{{x}}\nhi\n", ["delimiter"]),
        # comments, backslashes, arithmetic
        ("echo hi # {{x}}\necho {{y}}", ["comment", "bare"]),
        ("echo a#{{x}} $#", ["bare"]),
        ("echo \\{{x}}", ["escaped"]),
        ('echo "\\{{x}}"', ["escaped"]),
        ('echo "\\\\{{x}}"', ["double"]),
        ("echo \\'{{x}}", ["bare"]),
        ("echo $(( {{x}} + 1 ))", ["arith"]),
        ('echo $(( "{{x}}" + 1 ))', ["arith"]),
        ("(( {{x}} > 1 )) && echo {{y}}", ["arith", "bare"]),
        ("( (echo {{x}}) )", ["bare"]),
        # bash evaluates array subscripts, substring offsets and $[…] as arithmetic too
        ("a[{{x}}]=1", ["arith"]),
        ('echo "${a[{{x}}]}"', ["arith"]),
        ('echo "${X:{{x}}}" "${X: -{{y}}}"', ["arith", "arith"]),
        ("echo $[ {{x}} ]", ["arith"]),
        ('echo ${a[0]:-{{x}}} "${X:-{{y}}}" ${#X} {{z}}', ["bare", "double", "bare"]),
        ("ls file[0-9] {{x}}", ["bare"]),
        ("[[ {{x}} == a ]]", ["bare"]),
        # a case pattern's ")" does not end $(…)
        ('echo "$(case a in a) echo {{x}};; (b) echo;; esac) {{y}}"', ["bare", "double"]),
        ("case {{x}} in a) echo '{{y}}';; esac", ["bare", "single"]),
    ],
)
def test_contexts(text, expected):
    assert where(text) == expected


def test_unbalanced_and_deeply_nested_text_terminates():
    assert where('echo "$(' * 5000 + "{{x}}") == ["bare"]
    assert where("`" * 9999 + "{{x}}") == ["bare"]
    assert where("echo '" + "{{x}}" * 1000) == ["single"] * 1000
    assert where("cat <<A\n" * 3000 + "{{x}}") == ["heredoc"]


SHELL_BITS = [
    "{{x}}",
    "'",
    '"',
    "$'",
    '$"',
    "$(",
    "$((",
    "((",
    ")",
    "))",
    "${",
    "}",
    "`",
    "\\",
    "#",
    "<<",
    "<<-",
    "<<<",
    "EOF",
    "'EOF'",
    "\n",
    "\t",
    " ",
    "a",
    ";",
    "|",
    "&",
]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(SHELL_BITS), max_size=60).map("".join))
def test_any_text_gets_one_context_per_placeholder(text):
    spans = [m.span() for m in PLACEHOLDER.finditer(text)]
    found = contexts(text, spans)
    assert len(found) == len(spans)
    assert set(found) <= {
        "bare",
        "double",
        "heredoc",
        "comment",
        "single",
        "ansi",
        "quoted_heredoc",
        "arith",
        "escaped",
        "delimiter",
    }
