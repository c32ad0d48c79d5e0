"""Why a step ended as it did, in words: its exit code or signal, the timeout or limit it met, the
last lines of what it wrote, each attempt's own duration, and an agent's tool calls.

One home for these words: the bots write them into the thread, the step tree puts them on each
step (`show --json`), and the CLI and the console draw them from there.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterable
from typing import Any

from engine_adapter.model.names import ROUND_MARK, split_step_key
from engine_adapter.model.vocab import AttemptOutcome, EntryKind, StepKind, StepStatus

TAIL_LINES = 10  # a failed step's last lines of output, as the thread, CLI and console show them
TAIL_CHARS = 1500
ARGUMENTS_CHARS = 2000  # an agent tool call's arguments and result, as `show --json` holds them
RESULT_CHARS = 2000
LINE_CHARS = 160  # one call on one line (CLI, folded console row)


def exit_text(exit_code: int | None) -> str | None:
    """'exit 1', 'killed by SIGKILL', 'exit 137 (SIGKILL)'; None without an exit code."""
    if exit_code is None:
        return None
    if exit_code < 0:  # the process itself ended by a signal
        return f"killed by {_signal_name(-exit_code)}"
    if 128 < exit_code <= 128 + 64:  # a shell's way of saying its command was killed
        return f"exit {exit_code} ({_signal_name(exit_code - 128)})"
    return f"exit {exit_code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def failure_why(
    exit_code: int | None, timed_out: bool, timeout_s: float, limit: str | None
) -> str | None:
    """Why a command's attempt failed: the limit it met, its timeout, else its exit."""
    if limit:
        return limit
    if timed_out:
        return f"timed out after {timeout_s:g}s"
    return exit_text(exit_code) if exit_code else None


def said_why(reason: str | None, exit_code: int | None, output: Any) -> str:
    """A failure's why in a few words: its reason, else its exit, else its message's first line
    (a step that could not start says why in its output)."""
    first = next((line for line in as_lines(output) if line.strip()), "")
    return reason or exit_text(exit_code) or one_line(first, 200) or "no reason given"


def as_lines(text: Any) -> list[str]:
    return text.splitlines() if isinstance(text, str) else []


def retry_note(attempt: int, why: str, took: str, backoff_s: float, left: int, output: str) -> str:
    """The thread's line for a failed attempt that is tried again, with its last lines."""
    note = (
        f"Attempt {attempt} failed ({why}) after {took}; retrying in {backoff_s:g}s "
        f"({left} retries left)."
    )
    last_lines = tail(output)
    return note + ("\nLast lines of output:\n" + last_lines if last_lines else "")


_RETRY_NOTE = re.compile(r"Attempt \d+ failed \((.*)\) after ")


def note_why(line: str | None) -> str | None:
    """The why a retry note's first line gives (read back for that attempt)."""
    found = _RETRY_NOTE.match(line or "")
    return found.group(1) if found else None


def tail(text: Any, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last lines of a step's output (its stderr and stdout, as the command wrote them),
    bounded both ways; '' for none."""
    if not isinstance(text, str) or not text.strip():
        return ""
    kept = text.strip("\n").splitlines()[-lines:]
    out = "\n".join(kept)
    return out if len(out) <= chars else "…" + out[-(chars - 1) :]


def duration_text(seconds: float | None) -> str:
    """'12 ms', '3.4 s', '2 min 5 s'."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    return cut(" ".join(text.split()), limit)


# -- attempts ------------------------------------------------------------------------------------
def attempts_of(
    claims: Iterable[dict[str, Any]],
    exits: dict[tuple[str, int], int | None],
    path: str,
    whys: dict[tuple[str, int], str] | None = None,
) -> list[dict[str, Any]]:
    """A bot step's attempts over all its tries, each with its own duration (a retry's wait
    and the time a failed run sat parked are no attempt's). `exits`: (step key, attempt) -> the
    exit code its report gave. An agent step's later rounds are the same attempt going on."""
    out: list[dict[str, Any]] = []
    for claim in claims:
        key = claim["step_key"]
        _, claim_path, try_no = split_step_key(key)
        if claim_path != path or (ROUND_MARK in key and claim["attempt"] == 1):
            continue  # a later round's first attempt is the step's attempt going on
        started, finished = claim["started_at"], claim["finished_at"]
        exit_code = exits.get((key, claim["attempt"]))
        why = (whys or {}).get((key, claim["attempt"])) or exit_text(exit_code)
        out.append(
            {
                "try": try_no,
                "attempt": claim["attempt"],
                "status": claim["outcome"] or AttemptOutcome.RUNNING,
                "exit_code": exit_code,
                "why": why if claim["outcome"] == AttemptOutcome.FAILED else None,
                "started_at": started.isoformat(),
                "finished_at": finished.isoformat() if finished else None,
                "duration_s": round((finished - started).total_seconds(), 3) if finished else None,
            }
        )
    return out


def attempts_text(attempts: list[dict[str, Any]]) -> str:
    """Each attempt's own duration: '12 ms' or 'try 1: 12 ms ✗ exit 1 · try 2: 9 ms ✓'."""
    if not attempts:
        return ""
    if len(attempts) == 1:
        return duration_text(attempts[0]["duration_s"]) or AttemptOutcome.RUNNING
    parts = []
    for a in attempts:
        label = f"try {a['try']}" + (f".{a['attempt']}" if _several_in_try(attempts, a) else "")
        text = f"{label}: {duration_text(a['duration_s']) or AttemptOutcome.RUNNING}"
        text += _MARKS.get(a["status"], "")
        if a.get("why"):
            text += f" {a['why']}"
        parts.append(text)
    return " · ".join(parts)


def attempts_brief(attempts: list[dict[str, Any]]) -> str:
    """The same, for a table cell: '32 ms ✗ · 23 ms ✗', tries named only when there are several
    ('try 1: 32 ms ✗ · 23 ms ✗ · try 2: 30 ms ✓')."""
    tries = sorted({a["try"] for a in attempts})
    parts = []
    for try_no in tries:
        these = [
            (duration_text(a["duration_s"]) or AttemptOutcome.RUNNING) + _MARKS.get(a["status"], "")
            for a in attempts
            if a["try"] == try_no
        ]
        parts.append((f"try {try_no}: " if len(tries) > 1 else "") + " · ".join(these))
    return " · ".join(parts)


_MARKS = {
    AttemptOutcome.COMPLETED: " ✓",
    AttemptOutcome.FAILED: " ✗",
    AttemptOutcome.LOST: " lost",
    AttemptOutcome.CANCELLED: " cancelled",
}


def _several_in_try(attempts: list[dict[str, Any]], a: dict[str, Any]) -> bool:
    return sum(1 for b in attempts if b["try"] == a["try"]) > 1


# -- an agent's tool calls -----------------------------------------------------------------------
def tool_calls(entries: Iterable[dict[str, Any]], journal_key: str) -> list[dict[str, Any]]:
    """An agent step's tool calls from its journal entries (`agent:<journal key>:...`), in order:
    name, arguments (parsed JSON where they parse), result (each cut when long)."""
    prefix = f"agent:{journal_key}:"
    calls: dict[str, dict[str, Any]] = {}
    for entry in entries:
        key = entry.get("dedupe_key") or ""
        if not key.startswith(prefix):
            continue
        turn = key[len(prefix) :].split(":", 1)[0]
        message = (entry.get("data") or {}).get("message") or {}
        if entry["kind"] == EntryKind.AGENT_ASSISTANT:
            for i, tc in enumerate(message.get("tool_calls") or []):
                function = tc.get("function") or {}
                calls[f"{turn}:{i}"] = {
                    "turn": int(turn) if turn.isdigit() else turn,
                    "name": function.get("name"),
                    "arguments": _arguments(function.get("arguments") or ""),
                    "result": None,
                }
        elif entry["kind"] == EntryKind.AGENT_TOOL:
            _, _, index = key[len(prefix) :].partition(":tool:")
            call = calls.get(f"{turn}:{index}")
            if call is not None:
                content = str(message.get("content") or "")
                call["result"] = cut(content, RESULT_CHARS)
                call["result_chars"] = (entry.get("data") or {}).get("chars", len(content))
    return list(calls.values())


def _arguments(raw: str) -> Any:
    """The call's arguments as JSON where they parse (long strings in them cut), else the text."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return cut(raw, ARGUMENTS_CHARS)
    return _cut_strings(parsed)


def _cut_strings(value: Any) -> Any:
    if isinstance(value, str):
        return cut(value, ARGUMENTS_CHARS)
    if isinstance(value, dict):
        return {k: _cut_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v) for v in value]
    return value


def arguments_text(arguments: Any) -> str:
    """A call's arguments on one line: `command="ls -la"`, or the JSON as given."""
    if isinstance(arguments, dict):
        return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def call_text(call: dict[str, Any], limit: int = LINE_CHARS) -> str:
    """`run_command(command="ls") → exit 0 …`, on one line."""
    head = f"{call['name']}({arguments_text(call['arguments'])})"
    result = call.get("result")
    said = "(no result yet)" if result is None else (one_line(result) or "(empty)")
    return one_line(f"{head} → {said}", limit)


def calls_line(message_calls: Iterable[dict[str, Any]], limit: int = 400) -> str:
    """A model turn's calls as the thread says them: 'calls run_command(command="ls")'."""
    parts = [
        f"{(tc.get('function') or {}).get('name')}"
        f"({arguments_text(_arguments((tc.get('function') or {}).get('arguments') or ''))})"
        for tc in message_calls
    ]
    return "calls " + ", ".join(one_line(p, limit) for p in parts)


# -- a step as text ------------------------------------------------------------------------------
def detail_lines(node: dict[str, Any], indent: str) -> list[str]:
    """What `threadline show` prints under a step: its attempts' durations, why it failed with
    its output's last lines, and an agent's tool calls."""
    lines: list[str] = []
    attempts = node.get("attempt_list") or []
    if attempts and (len(attempts) > 1 or attempts[0]["duration_s"] is not None):
        lines.append(f"{indent}took {attempts_text(attempts)}")
    if node.get("status") == StepStatus.FAILED:
        if node.get("why"):
            lines.append(f"{indent}why: {node['why']}")
        if node.get("tail"):
            lines.append(f"{indent}last lines of output:")
            lines += [f"{indent}  | {line}" for line in node["tail"].splitlines()]
        elif node.get("kind") in (StepKind.RUN_COMMAND, StepKind.DISPATCH_TASK):
            lines.append(f"{indent}(the step wrote no output)")
    for call in node.get("tool_calls") or []:
        lines.append(f"{indent}↳ {call_text(call)}")
    return lines
