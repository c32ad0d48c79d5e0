"""The tools an agent bot may call: their declarations for the model, their argument checks, and
the file tools, confined to the run's working directory.

`run_command` runs through the bot's own command path (the step's sandbox, working directory,
timeout, output cap and clean environment); this module only checks its arguments.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

FINISH = "finish"
MAX_FILE_BYTES = 256 * 1024  # what read_file hands the model, and write_file accepts

_STRING = {"type": "string"}
SCHEMAS: dict[str, dict[str, Any]] = {
    "run_command": {
        "description": "Run a bash command in the run's working directory; returns its exit "
        "code and output.",
        "parameters": {
            "type": "object",
            "properties": {"command": _STRING},
            "required": ["command"],
        },
    },
    "read_file": {
        "description": "Read a text file, by its path relative to the run's working directory.",
        "parameters": {"type": "object", "properties": {"path": _STRING}, "required": ["path"]},
    },
    "write_file": {
        "description": "Write a text file (created or replaced), by its path relative to the "
        "run's working directory.",
        "parameters": {
            "type": "object",
            "properties": {"path": _STRING, "content": _STRING},
            "required": ["path", "content"],
        },
    },
    FINISH: {
        "description": "Finish the task with a structured result (any JSON object).",
        "parameters": {
            "type": "object",
            "properties": {"result": {"type": "object"}},
            "required": ["result"],
        },
    },
}


class ToolError(ValueError):
    """A bad tool call: answered to the model as an error, never a crash."""


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it


def declarations(tools: tuple[str, ...]) -> list[dict[str, Any]]:
    """The `tools` of a chat-completions request: the step's tools, and finish."""
    return [
        {"type": "function", "function": {"name": name, **SCHEMAS[name]}}
        for name in (*tools, FINISH)
    ]


def parse_arguments(call: Call, allowed: tuple[str, ...]) -> dict[str, Any]:
    """The call's arguments, checked against its tool's declaration; ToolError saying why not."""
    if call.name not in (*allowed, FINISH):
        raise ToolError(f"unknown tool {call.name!r}; available: {', '.join((*allowed, FINISH))}")
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as err:
        raise ToolError(f"arguments of {call.name} are not valid JSON: {err}") from None
    if not isinstance(args, dict):
        raise ToolError(f"arguments of {call.name} must be a JSON object")
    params = SCHEMAS[call.name]["parameters"]
    for key in params["required"]:
        if key not in args:
            raise ToolError(f"{call.name}: argument {key!r} is required")
    for key, value in args.items():
        want = params["properties"].get(key)
        if want is None:
            raise ToolError(f"{call.name}: unknown argument {key!r}")
        if want["type"] == "string" and not isinstance(value, str):
            raise ToolError(f"{call.name}: argument {key!r} must be a string")
        if want["type"] == "object" and not isinstance(value, dict):
            raise ToolError(f"{call.name}: argument {key!r} must be a JSON object")
    return args


def confined(workdir: Path, relative: str) -> Path:
    """`relative` inside workdir, or ToolError: no absolute path, no `..`, no symlink out."""
    if not relative or relative.startswith(("/", "~")) or "\0" in relative:
        raise ToolError(f"path {relative!r} must be relative to the run's working directory")
    if ".." in Path(relative).parts:
        raise ToolError(f"path {relative!r} may not contain '..'")
    root = workdir.resolve()
    target = (root / relative).resolve()  # follows symlinks: one pointing out is caught here
    if target != root and root not in target.parents:
        raise ToolError(f"path {relative!r} leads outside the run's working directory")
    return target


def read_file(workdir: Path, args: dict[str, Any]) -> str:
    path = confined(workdir, args["path"])
    if not path.is_file():
        raise ToolError(f"{args['path']}: no such file")
    data = path.read_bytes()
    text = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_FILE_BYTES:
        text += f"\n[{len(data) - MAX_FILE_BYTES} more bytes not shown]"
    return text


def write_file(workdir: Path, args: dict[str, Any], owner: tuple[int, int] | None) -> str:
    """Write the file; as the step user (owner) when steps run as one, so later commands of the
    run can change it."""
    content = args["content"].encode()
    if len(content) > MAX_FILE_BYTES:
        raise ToolError(f"content is {len(content)} bytes; at most {MAX_FILE_BYTES}")
    path = confined(workdir, args["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: a symlink planted between the check and the write is refused, not followed.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    if owner:
        os.chown(path, *owner)
    return f"wrote {len(content)} bytes to {args['path']}"


RunCommand = Callable[[str], str]


def run_tool(
    call: Call,
    allowed: tuple[str, ...],
    workdir: Path,
    run_command: RunCommand,
    owner: tuple[int, int] | None,
) -> str:
    """The text answered to the model for one (non-finish) call; a bad call answers its error."""
    try:
        args = parse_arguments(call, allowed)
        if call.name == "run_command":
            return run_command(args["command"])
        if call.name == "read_file":
            return read_file(workdir, args)
        return write_file(workdir, args, owner)
    except ToolError as err:
        return f"error: {err}"
    except OSError as err:
        return f"error: {call.name} failed: {err.strerror or err}"
