"""The `threadline` parser, built from one module per command group, offers exactly the commands,
options, defaults and help texts recorded in cli_parser.json (taken from the single-file parser
before the split), and no module of the command line grows long again."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine_adapter.cli.main import build_parser

HERE = Path(__file__).parent
SNAPSHOT = HERE / "cli_parser.json"
CLI = HERE.parents[1] / "engine_adapter" / "cli"
MAX_LINES = 560  # contract.py (the envelope's rules, its typed request reading) is the longest


def _name(value: Any) -> Any:
    return getattr(value, "__name__", value)


def _option(action: argparse.Action) -> dict[str, Any]:
    fields = {
        "strings": action.option_strings,
        "dest": action.dest,
        "action": type(action).__name__,
        "default": _name(action.default),
        "help": action.help,
        "required": action.required,
        "choices": list(action.choices) if action.choices else None,
        "type": _name(action.type),
        "metavar": action.metavar,
        "nargs": action.nargs,
        "const": action.const,
    }
    return {k: v for k, v in fields.items() if v not in (None, False, [])}


def describe(
    parser: argparse.ArgumentParser, path: str = "", help: str | None = None
) -> dict[str, Any]:
    """Each (sub)command by its words: help, description, epilog, defaults (a command function
    by its name), options in order, subcommands in order, mutually exclusive groups."""
    node: dict[str, Any] = {
        "help": help,
        "description": parser.description,
        "epilog": parser.epilog,
        "defaults": {k: _name(v) for k, v in sorted(parser._defaults.items())},
        "options": [],
    }
    found = {path: node}
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            node["options"].append(_option(action))
            continue
        node["subcommands"] = [c.dest for c in action._choices_actions]
        node["subcommand_spec"] = [action.dest, action.required, action.metavar]
        helps = {c.dest: c.help for c in action._choices_actions}
        for name, sub in action.choices.items():
            found |= describe(sub, f"{path} {name}".strip(), helps.get(name))
    node["exclusive"] = [
        [g.required, [a.dest for a in g._group_actions]] for g in parser._mutually_exclusive_groups
    ]
    return found


def test_the_parser_offers_what_it_offered() -> None:
    want = json.loads(SNAPSHOT.read_text())
    got = json.loads(json.dumps(describe(build_parser()), default=str))
    assert list(got) == list(want), "commands added, lost or reordered"
    for path in want:
        assert got[path] == want[path], f"`threadline {path}` differs"


def test_no_command_line_module_is_long() -> None:
    long = {
        p.name: n for p in CLI.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, long


if (
    __name__ == "__main__"
):  # re-record after a deliberate change: python tests/unit/test_cli_parser.py
    text = json.dumps(describe(build_parser()), default=str, indent=None)
    SNAPSHOT.write_text(
        "{\n"
        + ",\n".join(
            f"{json.dumps(k)}: {json.dumps(v, default=str)}" for k, v in json.loads(text).items()
        )
        + "\n}\n"
    )
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
