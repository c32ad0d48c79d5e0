"""Placeholders in step text: {{payload.x}} and {{steps.<id>.output}}.

Instructions, questions and timestamps get the values substituted. A command never does: each
placeholder becomes a reference to an environment variable holding the value (shell_context.py),
so the shell never parses a value, whatever its quotes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine_adapter.model.domain import step_value
from engine_adapter.model.errors import Invalid
from engine_adapter.recipes import shell_context
from engine_adapter.recipes.recipes import PLACEHOLDER

# Linux caps one environment string ("NAME=value" and its NUL) at 32 pages (MAX_ARG_STRLEN), and
# all of them with the arguments at a quarter of the stack limit: stay well under both.
MAX_VALUE_BYTES = 128 * 1024
MAX_VALUES_BYTES = 1024 * 1024
_NOT_NAME = re.compile(r"[^A-Za-z0-9]+")


class RenderError(Invalid):
    """A placeholder whose path resolves to nothing, or a value a step cannot take; names it."""


@dataclass(frozen=True)
class Command:
    """A run_command ready to run: text referencing variables, and the variables' values."""

    text: str
    values: dict[str, str]


def render(
    text: str, payload: Any, outputs: dict[str, Any], scope: Mapping[str, Any] | None = None
) -> str:
    """Substitute the values into text that no shell reads (an instruction, a question, a time)."""
    return PLACEHOLDER.sub(
        lambda m: as_text(resolve(m.group(1).strip(), payload, outputs, scope)), text
    )


def render_command(
    text: str, payload: Any, outputs: dict[str, Any], scope: Mapping[str, Any] | None = None
) -> Command:
    """Each placeholder becomes "$TL_<PATH>" (unquoted) or ${TL_<PATH>} (in "…" or a heredoc); the
    values go with it. RenderError for a placeholder where a variable cannot expand."""
    matches = list(PLACEHOLDER.finditer(text))
    where = shell_context.placements(text, [m.span() for m in matches])
    names = variable_names([m.group(1).strip() for m in matches])
    values: dict[str, str] = {}
    out, last = [], 0
    for match, place in zip(matches, where, strict=True):
        path = match.group(1).strip()
        if place.refusal:  # a recipe stored before a rule was added is checked again here
            raise RenderError(f"{{{{{path}}}}} {place.refusal}")
        name = names[path]
        if name not in values:
            values[name] = _env_value(name, path, resolve(path, payload, outputs, scope))
        reference = f'"${name}"' if place.context == shell_context.BARE else f"${{{name}}}"
        out += [text[last : match.start()], reference]
        last = match.end()
    out.append(text[last:])
    total = sum(len(n) + len(v.encode()) + 2 for n, v in values.items())
    if total > MAX_VALUES_BYTES:
        raise RenderError(
            f"the step's placeholder values come to {total} bytes; a step's "
            f"environment takes at most {MAX_VALUES_BYTES} (pass large data in a file)"
        )
    return Command("".join(out), values)


def variable_names(paths: list[str]) -> dict[str, str]:
    """Each distinct path -> a variable name derived from it (payload.target -> TL_PAYLOAD_TARGET);
    paths that map to one name get _2, _3, ... in order of appearance."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for path in paths:
        if path in names:
            continue
        base = "TL_" + _NOT_NAME.sub("_", path).strip("_").upper()
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        names[path] = name
        taken.add(name)
    return names


def as_text(value: Any) -> str:
    """A value as text: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _env_value(name: str, path: str, value: Any) -> str:
    text = as_text(value)
    if "\0" in text:
        raise RenderError(
            f"{{{{{path}}}}}: the value holds a NUL character, which no environment variable can"
        )
    size = len(name) + len(text.encode(errors="replace")) + 2
    if size > MAX_VALUE_BYTES:
        room = MAX_VALUE_BYTES - len(name) - 2
        raise RenderError(
            f"{{{{{path}}}}}: the value is {size - len(name) - 2} bytes; an "
            f"environment variable of a step holds at most {room} "
            f"(pass large data in a file)"
        )
    return text


def resolve(
    path: str, payload: Any, outputs: dict[str, Any], scope: Mapping[str, Any] | None = None
) -> Any:
    """A placeholder's value. `outputs`: each finished step's output by id; `scope` (a control-flow
    run's): `steps` (each step's status, output, exit code), named `outputs`, and inside a loop
    `item`, `index`, `iteration`."""
    parts = path.split(".")
    scope = scope or {}
    if parts[0] == "payload":
        return _walk(path, parts, payload, "the payload")
    if parts[0] in ("item", "index", "iteration") and parts[0] in scope:
        return _walk(path, parts, scope[parts[0]], parts[0])
    if parts[0] == "outputs" and len(parts) >= 2:
        named = scope.get("outputs") or {}
        if parts[1] not in named:
            raise RenderError(f"{{{{{path}}}}}: no step has named its output {parts[1]!r} yet")
        return step_value(_walk(path, parts, named, "the named outputs"))
    if parts[0] == "steps" and len(parts) == 3 and parts[2] == "output":
        if parts[1] not in outputs:
            raise RenderError(f"{{{{{path}}}}}: step {parts[1]} has no output yet")
        # As the shell's $(...) does: "echo hi" outputs "hi\n", and the newline is not part of it.
        return step_value(outputs[parts[1]])
    if parts[0] == "steps" and len(parts) == 3 and parts[1] in (scope.get("steps") or {}):
        view = scope["steps"][parts[1]]
        if parts[2] not in view:
            raise RenderError(f"{{{{{path}}}}}: a step has no field {parts[2]!r}")
        return view[parts[2]]
    raise RenderError(
        f"{{{{{path}}}}}: unknown placeholder (use payload.<path>, steps.<id>.output, "
        "outputs.<name>, or item inside a foreach)"
    )


def _walk(path: str, parts: list[str], value: Any, where: str) -> Any:
    """Follow parts[1:] through mappings and lists; RenderError naming the first missing part."""
    for i, part in enumerate(parts[1:], start=1):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif (
            isinstance(value, list)
            and part.isascii()
            and part.isdigit()
            and len(part) < 10
            and int(part) < len(value)
        ):
            value = value[int(part)]
        else:
            shown = ".".join(parts[: i + 1])
            raise RenderError(f"{{{{{path}}}}}: {shown} is not in {where}")
    return value
