"""A recipe's `payload_schema:`: a JSON Schema (Draft 2020-12) every run's payload must satisfy.

The schema is checked when the recipe is validated; a payload at spawn, before anything is
written. Only local references (`#/$defs/...`) are allowed: nothing is fetched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from engine_adapter.recipes.recipe_doc import json_only

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

# jsonschema is imported where a schema is checked, not with this module: its format checkers
# compile grammars at import (seconds on a busy machine), which every process start (conductor,
# bots, each CLI call) paid though most recipes have no payload_schema.

MAX_ERRORS = 5
_REF_KEYWORDS = ("$ref", "$dynamicRef")


def check_schema(schema: Any, errors: list[str], path: str = "payload_schema") -> dict | None:
    """The schema if it is a valid Draft 2020-12 schema object; otherwise problems go to errors."""
    if not isinstance(schema, dict):
        errors.append(
            f"{path}: must be a JSON Schema object (a mapping such as "
            f"{{type: object, properties: {{...}}}}), got {_q(schema)}"
        )
        return None
    problems = json_only(schema, path)
    if not problems:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as err:
            problems.append(f"{_join(path, err.absolute_path)}: {err.message}")
        except Exception as err:  # the checker's own failure is the schema's problem
            problems.append(f"{path}: cannot be checked ({type(err).__name__}: {str(err)[:200]})")
    if not problems:
        problems += _check_refs(schema, path)
    errors += problems
    return None if problems else schema


def payload_problems(schema: dict | None, payload: Any) -> list[str]:
    """Why payload does not satisfy schema, as "payload.<path>: <rule>" (none when it does)."""
    if schema is None:
        return []
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    try:
        found = sorted(
            validator.iter_errors(payload), key=lambda e: [str(p) for p in e.absolute_path]
        )
    except Exception as err:  # a schema stored before a check existed
        why = f"{type(err).__name__}: {str(err)[:200]}"
        return [f"payload: cannot be checked against payload_schema ({why})"]
    problems = [f"{_join('payload', e.absolute_path)}: {_rule(e)}" for e in found[:MAX_ERRORS]]
    if len(found) > MAX_ERRORS:
        problems.append(f"... and {len(found) - MAX_ERRORS} more")
    return problems


def _check_refs(schema: dict, path: str) -> list[str]:
    """Every $ref is local and resolves within the schema."""
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    resolver = Registry().with_resource("", DRAFT202012.create_resource(schema)).resolver()
    problems = []
    for where, ref in _refs(schema, path):
        if not ref.startswith("#"):
            problems.append(
                f"{where}: {_q(ref)} must be a reference inside the schema "
                f"(like #/$defs/name): nothing is fetched"
            )
            continue
        try:
            resolver.lookup(ref)
        except Exception:  # referencing's errors name the reference, we say where
            problems.append(f"{where}: {_q(ref)} refers to nothing in the schema")
    return problems


def _refs(value: Any, path: str) -> Iterable[tuple[str, str]]:
    todo = [(value, path)]
    while todo:
        item, where = todo.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if key in _REF_KEYWORDS and isinstance(sub, str):
                    yield f"{where}.{key}", sub
                else:
                    todo.append((sub, f"{where}.{key}"))
        elif isinstance(item, list):
            todo.extend((sub, f"{where}[{i}]") for i, sub in enumerate(item))


def _rule(err: ValidationError) -> str:
    """The broken rule in words, values quoted as JSON."""
    if err.validator == "pattern":
        return f"{_q(err.instance)} does not match {_q(err.validator_value)}"
    if err.validator == "enum":
        options = ", ".join(_q(v) for v in err.validator_value)
        return f"{_q(err.instance)} is not one of {options}"
    if err.validator == "const":
        return f"{_q(err.instance)} is not {_q(err.validator_value)}"
    if err.validator == "type":
        return f"{_q(err.instance)} is not of type {_q(err.validator_value)}"
    return err.message


def _join(path: str, parts: Iterable[Any]) -> str:
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _q(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
