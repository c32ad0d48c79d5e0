"""Placeholders in step text: {{payload.x}} and {{steps.<id>.output}}."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from .recipes import PLACEHOLDER


class RenderError(ValueError):
    """A placeholder whose path resolves to nothing; names the path."""


def render(text: str, payload: Any, outputs: dict[str, Any], *, shell: bool) -> str:
    """Substitute placeholders; values are shell-quoted when the text is a command."""

    def substitute(match: re.Match[str]) -> str:
        path = match.group(1)
        value = resolve(path, payload, outputs)
        as_text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return shlex.quote(as_text) if shell else as_text

    return PLACEHOLDER.sub(substitute, text)


def resolve(path: str, payload: Any, outputs: dict[str, Any]) -> Any:
    parts = path.split(".")
    if parts[0] == "payload":
        value: Any = payload
        for i, part in enumerate(parts[1:], start=1):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                raise RenderError(f"{{{{{path}}}}}: {'.'.join(parts[: i + 1])} is not in the payload")
        return value
    if parts[0] == "steps" and len(parts) == 3 and parts[2] == "output":
        if parts[1] not in outputs:
            raise RenderError(f"{{{{{path}}}}}: step {parts[1]} has no output yet")
        output = outputs[parts[1]]
        # As the shell's $(...) does: "echo hi" outputs "hi\n", and the newline is not part of it.
        return output.rstrip("\n") if isinstance(output, str) else output
    raise RenderError(f"{{{{{path}}}}}: unknown placeholder (use payload.<path> or steps.<id>.output)")
