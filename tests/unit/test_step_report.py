"""step_report: a step's why, its output's last lines, its attempts' times and an agent's calls,
in words, bounded."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from engine_adapter.read import step_report


def test_an_exit_says_the_code_or_the_signal():
    assert step_report.exit_text(None) is None
    assert step_report.exit_text(1) == "exit 1"
    assert step_report.exit_text(-9) == "killed by SIGKILL"
    assert step_report.exit_text(137) == "exit 137 (SIGKILL)"
    assert step_report.exit_text(255) == "exit 255"


def test_a_failure_names_its_limit_then_its_timeout_then_its_exit():
    assert step_report.failure_why(-9, True, 5, "memory limit 64 MiB reached") == (
        "memory limit 64 MiB reached"
    )
    assert step_report.failure_why(-15, True, 5, None) == "timed out after 5s"
    assert step_report.failure_why(2, False, 5, None) == "exit 2"
    assert step_report.failure_why(0, False, 5, None) is None


def test_a_retry_note_gives_back_the_why_it_was_written_with():
    note = step_report.retry_note(2, "exit 137 (SIGKILL)", "12 ms", 1.5, 1, "a\nb\n")
    assert note == (
        "Attempt 2 failed (exit 137 (SIGKILL)) after 12 ms; retrying in 1.5s (1 retries left)."
        "\nLast lines of output:\na\nb"
    )
    assert step_report.note_why(note.splitlines()[0]) == "exit 137 (SIGKILL)"
    assert step_report.note_why("Attempt 2 of step x starting.") is None
    assert step_report.note_why(None) is None


def test_the_tail_is_the_last_lines_bounded_both_ways():
    assert step_report.tail("") == "" and step_report.tail(None) == ""
    text = "\n".join(f"line {i}" for i in range(1, 31)) + "\n"
    assert step_report.tail(text).splitlines() == [f"line {i}" for i in range(21, 31)]
    wide = step_report.tail("x" * 10_000)
    assert len(wide) == step_report.TAIL_CHARS and wide.startswith("…")
    assert step_report.tail("\n[timed out after 1s]") == "[timed out after 1s]"


def test_each_attempt_keeps_its_own_time_and_a_rounds_first_attempt_is_no_new_one():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def claim(key: str, attempt: int, start: float, took: float, outcome: str) -> dict:
        started = t0 + timedelta(seconds=start)
        return {
            "step_key": key,
            "attempt": attempt,
            "started_at": started,
            "finished_at": started + timedelta(seconds=took),
            "outcome": outcome,
        }

    claims = [
        claim("r:build:1", 1, 0, 0.02, "failed"),
        claim("r:build:1", 2, 2, 0.03, "failed"),
        claim("r:build:2", 1, 34, 0.01, "completed"),  # `threadline retry` half a minute later
        claim("r:build~r2:2", 1, 40, 1, "completed"),  # a later round: the same attempt
        claim("r:other:1", 1, 0, 5, "completed"),
    ]
    exits = {("r:build:1", 1): 1, ("r:build:1", 2): 1, ("r:build:2", 1): 0}
    attempts = step_report.attempts_of(claims, exits, "build")
    assert [(a["try"], a["attempt"], a["duration_s"], a["why"]) for a in attempts] == [
        (1, 1, 0.02, "exit 1"),
        (1, 2, 0.03, "exit 1"),
        (2, 1, 0.01, None),
    ]
    assert step_report.attempts_brief(attempts) == "try 1: 20 ms ✗ · 30 ms ✗ · try 2: 10 ms ✓"
    assert step_report.attempts_text(attempts) == (
        "try 1.1: 20 ms ✗ exit 1 · try 1.2: 30 ms ✗ exit 1 · try 2: 10 ms ✓"
    )


def test_tool_calls_pair_arguments_with_results_and_cut_long_ones():
    key = "r:think:1"
    long = "y" * 5000
    entries = [
        {
            "kind": "agent.assistant",
            "dedupe_key": f"agent:{key}:1:assistant",
            "data": {
                "message": {
                    "tool_calls": [
                        {"function": {"name": "run_command", "arguments": '{"command": "ls"}'}},
                        {"function": {"name": "write_file", "arguments": "not json"}},
                    ]
                }
            },
        },
        {
            "kind": "agent.tool",
            "dedupe_key": f"agent:{key}:1:tool:0",
            "data": {"message": {"content": long[:4000]}, "chars": 5000},
        },
        {  # another step's journal
            "kind": "agent.tool",
            "dedupe_key": "agent:r:other:1:1:tool:0",
            "data": {"message": {"content": "no"}},
        },
    ]
    calls = step_report.tool_calls(entries, key)
    assert [(c["turn"], c["name"], c["arguments"]) for c in calls] == [
        (1, "run_command", {"command": "ls"}),
        (1, "write_file", "not json"),
    ]
    assert len(calls[0]["result"]) == step_report.RESULT_CHARS and calls[0]["result_chars"] == 5000
    assert calls[1]["result"] is None
    assert step_report.call_text(calls[0]).startswith('run_command(command="ls") → yyy')
    assert len(step_report.call_text(calls[0])) == step_report.LINE_CHARS
    said = step_report.calls_line(entries[0]["data"]["message"]["tool_calls"])
    assert said == 'calls run_command(command="ls"), write_file(not json)'
    huge = json.dumps({"content": "z" * 10_000})
    cut = step_report.calls_line([{"function": {"name": "write_file", "arguments": huge}}])
    assert len(cut) < 500 and cut.endswith("…")
