"""The tools an agent bot may call: their declarations for the model, their argument checks, and
how each runs.

Every tool runs through the bot's own command path: the step's sandbox, user, working directory,
timeout, output cap and clean environment. The file tools are commands too (`head -c`, `cat >`),
so they meet exactly the trust boundary `run_command` meets; the bot process itself never opens
a path the model names. Their paths must be relative and free of `..`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_adapter.model.errors import Invalid

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
    "ask_human": {
        "description": "Ask a person a question in the run's thread and wait for the answer "
        "(it may take hours; you hold nothing while you wait).",
        "parameters": {
            "type": "object",
            "properties": {"question": _STRING},
            "required": ["question"],
        },
    },
    "start_workflow": {
        "description": "Start runs of workflows (only those this step allows) and wait for all "
        "of them, or for the first to finish (wait: any; the others are cancelled). Returns each "
        "run's status and output.",
        "parameters": {
            "type": "object",
            "properties": {
                "runs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"workflow": _STRING, "payload": {"type": "object"}},
                        "required": ["workflow"],
                    },
                },
                "wait": {"type": "string", "enum": ["all", "any"]},
            },
            "required": ["runs"],
        },
    },
    "propose_change": {
        "description": "Propose a change to this run's own workflow: the whole new recipe as "
        "YAML and a summary of why. A person reviews it; nothing changes until they apply it.",
        "parameters": {
            "type": "object",
            "properties": {"recipe": _STRING, "summary": _STRING},
            "required": ["recipe", "summary"],
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


class ToolError(Invalid):
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
        if want["type"] == "array" and not isinstance(value, list):
            raise ToolError(f"{call.name}: argument {key!r} must be a JSON array")
        if "enum" in want and value not in want["enum"]:
            raise ToolError(f"{call.name}: argument {key!r} must be one of {want['enum']}")
    return args


MAX_STARTED_RUNS = 20  # one start_workflow call's runs


def check_start(args: dict[str, Any], allowed: tuple[str, ...]) -> list[dict[str, Any]]:
    """start_workflow's runs, each {workflow, payload}, checked against the workflows the step
    allows; ToolError saying which entry is wrong."""
    runs = args["runs"]
    if not runs or len(runs) > MAX_STARTED_RUNS:
        raise ToolError(f"start_workflow: runs must hold 1 to {MAX_STARTED_RUNS} entries")
    checked = []
    for i, run in enumerate(runs):
        where = f"start_workflow: runs[{i}]"
        if not isinstance(run, dict) or set(run) - {"workflow", "payload"}:
            raise ToolError(f"{where} must be an object with workflow and payload")
        workflow, payload = run.get("workflow"), run.get("payload", {})
        if workflow not in allowed:
            raise ToolError(
                f"{where}: workflow {workflow!r} is not one this step may start "
                f"(allowed: {', '.join(allowed) or 'none'})"
            )
        if not isinstance(payload, dict):
            raise ToolError(f"{where}.payload must be a JSON object")
        checked.append({"workflow": workflow, "payload": payload})
    return checked


def relative_path(relative: str) -> str:
    """A path the file tools take: relative to the run's working directory, no `..`. (Where it
    may lead is the sandbox's business, as for any command of the step.)"""
    if not relative or relative.startswith(("/", "~", "-")) or "\0" in relative:
        raise ToolError(f"path {relative!r} must be relative to the run's working directory")
    if ".." in Path(relative).parts:
        raise ToolError(f"path {relative!r} may not contain '..'")
    return relative


def read_file_command(relative: str) -> str:
    """The command that reads a file for the model (a little over the cap, to say it is cut)."""
    return f"head -c {MAX_FILE_BYTES + 1} -- {shlex.quote(relative)}"


def write_file_command(relative: str) -> str:
    """The command that writes a file from its standard input, parents created."""
    quoted = shlex.quote(relative)
    parent = shlex.quote(str(Path(relative).parent))
    return f"mkdir -p -- {parent} && cat > {quoted}"


# (command, standard input or None) -> (exit code, output) of a command run as the step runs.
RunCommand = Callable[[str, str | None], tuple[int | None, str]]


def run_tool(call: Call, allowed: tuple[str, ...], run_command: RunCommand) -> str:
    """The text answered to the model for one (non-finish) call; a bad call answers its error."""
    try:
        args = parse_arguments(call, allowed)
        if call.name == "run_command":
            code, output = run_command(args["command"], None)
            return f"exit code {code}\n{output}"
        path = relative_path(args["path"])
        if call.name == "read_file":
            code, output = run_command(read_file_command(path), None)
            if code != 0:
                return f"error: {args['path']}: cannot read it (exit {code}): {output.strip()}"
            if len(output.encode()) > MAX_FILE_BYTES:
                output = output.encode()[:MAX_FILE_BYTES].decode(errors="replace")
                output += "\n[cut: the file is longer]"
            return output
        content = args["content"]
        if len(content.encode()) > MAX_FILE_BYTES:
            raise ToolError(f"content is {len(content.encode())} bytes; at most {MAX_FILE_BYTES}")
        code, output = run_command(write_file_command(path), content)
        if code != 0:
            return f"error: {args['path']}: cannot write it (exit {code}): {output.strip()}"
        return f"wrote {len(content.encode())} bytes to {args['path']}"
    except ToolError as err:
        return f"error: {err}"
