"""The vocabularies have one home: no run or step state is spelt as a bare string outside
`engine_adapter/model/vocab.py`, so renaming or adding a state cannot miss a comparison."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import get_args

import absurd_sdk

from engine_adapter.model.vocab import EnvelopeStatus, RunState, StepStatus, TaskState

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("engine_adapter", "console")
HOME = Path("engine_adapter/model/vocab.py")
STATES = {str(s) for s in (*RunState, *StepStatus)}

# Strings that spell a state but are not one: (file, string) -> (how many, why).
_FIELD = "the name of a field (a dict key or column that JSON, the API or a frame carries)"
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("engine_adapter/conductor/conductor.py", "skipped"): (1, "log prose: a slot with no run"),
    ("engine_adapter/conductor/handler_base.py", "completed"): (
        1,
        "the closing note's dedupe key, stored: kept as first written, however the run ends",
    ),
    ("engine_adapter/model/domain.py", "skipped"): (1, _FIELD),
    ("engine_adapter/model/names.py", "failed"): (1, "a checkpoint's name, not a state"),
    ("engine_adapter/runs/child_runs.py", "cancelled"): (1, _FIELD),
    ("engine_adapter/runs/schedules.py", "skipped"): (1, _FIELD),
    ("engine_adapter/testing/frames.py", "skipped"): (1, _FIELD),
    ("console/api.py", "cancelled"): (1, _FIELD),
    ("console/api.py", "gate"): (3, _FIELD),
    ("console/state.py", "waiting"): (1, _FIELD),
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (or other bare string statements)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def _field_names(tree: ast.AST) -> set[int]:
    """ids of the constants that name a field, not a value: `row["gate"]`, `d.get("waiting")`."""
    names: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            names.add(id(node.slice))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(id(node.args[0]))
    return names


def bare_states(source: str) -> list[tuple[int, str]]:
    """(line, string) of each string constant in `source` that spells a run or step state."""
    tree = ast.parse(source)
    skip = _docstrings(tree) | _field_names(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in STATES
        and id(node) not in skip
    ]


def scan() -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = {}
    for part in SCANNED:
        for path in sorted((ROOT / part).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel == HOME:
                continue
            for line, value in bare_states(path.read_text()):
                found.setdefault((rel.as_posix(), value), []).append(line)
    return found


def test_no_bare_state_string_outside_the_vocabulary() -> None:
    found = scan()
    bare = [
        f"{f}:{sorted(lines)} {v!r}"
        for (f, v), lines in found.items()
        if len(lines) != ALLOWED.get((f, v), (0, ""))[0]
    ]
    assert not bare, "use the enums of engine_adapter/model/vocab.py instead of: " + ", ".join(bare)


def test_the_allowlist_names_only_what_is_there() -> None:
    stale = set(ALLOWED) - set(scan())
    assert not stale, f"allowed but no longer present, remove: {sorted(stale)}"


def test_the_scan_sees_a_bare_state_and_skips_docstrings_and_field_names() -> None:
    source = '"""completed"""\nif run["state"] == "failed" and d.get("waiting"):\n    x = "x"\n'
    assert bare_states(source) == [(2, "failed")]


def test_members_are_their_strings() -> None:
    """What the database, the JSON and the f-strings see of a member is its value."""
    assert RunState.COMPLETED == "completed"
    assert f"{RunState.FAILED}" == "failed"
    assert json.dumps({StepStatus.GATE: RunState.WAITING}) == '{"gate": "waiting"}'


def test_the_envelope_status_is_the_schemas() -> None:
    schema = json.loads((ROOT / "engine_adapter/cli/schemas/envelope.schema.json").read_text())
    assert schema["properties"]["status"]["enum"] == list(EnvelopeStatus)


def test_the_engines_task_states_are_absurds() -> None:
    assert set(get_args(absurd_sdk.TaskResultState)) == set(TaskState)


def test_every_run_state_has_a_chart_colour() -> None:
    from console.charts import STATE_COLORS

    assert set(STATE_COLORS) == set(RunState)
