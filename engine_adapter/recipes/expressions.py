"""Expressions in recipes (`if`, `foreach`, `until`, run `outputs`): checked when a recipe is
applied, evaluated by the conductor once per decision (the result is checkpointed).

Evaluation is simpleeval's (never Python's `eval`): Python's expression syntax over plain data,
no attribute access but a field of a mapping (`steps.check.status`), no methods, a few pure
functions, bounded powers and string sizes, and no randomness or clock, so a decision depends on
the run's data alone.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Mapping
from typing import Any

import simpleeval

from engine_adapter.model.errors import Invalid

MAX_CHARS = 1000
# The names an expression may start from; `item`, `index` and `iteration` only inside a loop.
ROOTS = ("payload", "steps", "outputs", "item", "index", "iteration")
LOOP_ROOTS = ("item", "index", "iteration")
_CONSTANTS = {
    "true": True,
    "false": False,
    "null": None,
    "True": True,
    "False": False,
    "None": None,
}


class ExpressionError(Invalid):
    """An expression that cannot be used: it does not parse, or its evaluation failed."""


def _lines(text: Any) -> list[str]:
    return [line for line in str(text).splitlines() if line.strip()]


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError as err:
        raise ExpressionError(f"json(): not JSON ({err})") from None


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": len,
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "abs": abs,
    "min": min,
    "max": max,
    "lower": lambda s: str(s).lower(),
    "upper": lambda s: str(s).upper(),
    "strip": lambda s: str(s).strip(),
    "startswith": lambda s, p: str(s).startswith(p),
    "endswith": lambda s, p: str(s).endswith(p),
    "lines": _lines,  # an output's non-empty lines: `foreach: lines(steps.list.output)`
    "json": _json,  # an output parsed as JSON
    "range": lambda *a: list(range(*a))[:10_000],
}

_ALLOWED_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Constant,
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Load,
    ast.operator,
    ast.boolop,
    ast.unaryop,
    ast.cmpop,
    ast.Slice,
)


class _Evaluator(simpleeval.EvalWithCompoundTypes):
    def _eval_attribute(self, node: ast.Attribute) -> Any:
        # `a.b` is a field of a mapping, nothing else: no Python attribute is ever reached.
        value = self._eval(node.value)
        if isinstance(value, Mapping):
            if node.attr in value:
                return value[node.attr]
            raise ExpressionError(f"{_dotted(node.value) or 'value'} has no field {node.attr!r}")
        raise ExpressionError(
            f".{node.attr}: fields belong to mappings, not {type(value).__name__}"
        )


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def parse(expr: Any) -> ast.Expression:
    """The expression's syntax tree; ExpressionError saying what is wrong."""
    if not isinstance(expr, str) or not expr.strip():
        raise ExpressionError(f"must be a non-empty expression string, got {expr!r:.60}")
    if len(expr) > MAX_CHARS:
        raise ExpressionError(f"is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as err:
        raise ExpressionError(f"{expr!r:.80} does not parse ({err.msg})") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ExpressionError(f"{expr!r:.80}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and not node.keywords
        ):
            raise ExpressionError(
                f"{expr!r:.80}: only these functions may be called: {', '.join(FUNCTIONS)}"
            )
    return tree


def check(expr: Any, *, earlier: set[str] | None, in_loop: bool) -> list[str]:
    """Every problem of an expression at apply: syntax, unknown names, later steps referred to.
    `earlier`: the step ids this expression may refer to (None: not checked)."""
    try:
        tree = parse(expr)
    except ExpressionError as err:
        return [str(err)]
    problems: list[str] = []
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name) or id(node) in calls or node.id in _CONSTANTS:
            continue
        if node.id not in ROOTS:
            problems.append(f"{node.id!r} is not known (start from {', '.join(ROOTS[:3])})")
        elif node.id in LOOP_ROOTS and not in_loop:
            problems.append(f"{node.id!r} exists only inside a foreach or repeat")
    if earlier is not None:
        for ref in step_refs(tree):
            if ref not in earlier:
                problems.append(f"steps.{ref} refers to no earlier step")
    return problems


def step_refs(tree: ast.AST) -> list[str]:
    """The step ids an expression reads (`steps.<id>` or `steps["<id>"]`)."""
    refs = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Attribute, ast.Subscript)):
            continue
        base = node.value
        if not (isinstance(base, ast.Name) and base.id == "steps"):
            continue
        if isinstance(node, ast.Attribute):
            refs.append(node.attr)
        elif isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            refs.append(node.slice.value)
    return refs


def evaluate(expr: str, scope: Mapping[str, Any]) -> Any:
    """The expression's value over the run's data; ExpressionError with the reason."""
    parse(expr)
    evaluator = _Evaluator(
        names={**_CONSTANTS, **{k: scope[k] for k in ROOTS if k in scope}},
        functions=dict(FUNCTIONS),  # simpleeval adds to the dict it is given
    )
    try:
        return evaluator.eval(expr.strip())
    except ExpressionError:
        raise
    except simpleeval.NameNotDefined as err:
        raise ExpressionError(f"{err.name!r} is not defined here") from None
    except (simpleeval.InvalidExpression, KeyError, IndexError, TypeError, ValueError) as err:
        raise ExpressionError(f"{expr!r:.80}: {type(err).__name__}: {err}") from None
    except (ArithmeticError, RecursionError, MemoryError) as err:
        raise ExpressionError(f"{expr!r:.80}: {type(err).__name__}: {err}") from None


def truthy(expr: str, scope: Mapping[str, Any]) -> bool:
    return bool(evaluate(expr, scope))
