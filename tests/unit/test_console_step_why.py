"""The run page's step table and the detail under it say why a step failed, each attempt's own
time, and an agent's tool calls; what a step wrote is escaped, never markup."""

from __future__ import annotations

from datetime import UTC, datetime

from console import state
from tests.unit.test_console_state import run_with, step

NOW = datetime(2026, 11, 23, 7, 0, 34, tzinfo=UTC)


def attempt(try_no: int, n: int, seconds: float, status: str = "failed") -> dict:
    return {
        "try": try_no,
        "attempt": n,
        "status": status,
        "exit_code": 1 if status == "failed" else 0,
        "why": "exit 1" if status == "failed" else None,
        "started_at": "2026-11-23T07:00:00+00:00",
        "finished_at": "2026-11-23T07:00:01+00:00",
        "duration_s": seconds,
    }


def test_a_failed_steps_row_says_why_and_each_attempts_own_time():
    failed = step(
        "maybe",
        "run_command",
        "failed",
        output="",
        reason="exit 1",
        why="exit 1",
        tail="",
        # Two instant tries, half a minute apart: the wall time from the first start is 34 s.
        started_at="2026-11-23T07:00:00+00:00",
        finished_at="2026-11-23T07:00:34+00:00",
        attempt_list=[attempt(1, 1, 0.012), attempt(2, 1, 0.009)],
    )
    row = state.stepper_rows(run_with([failed], state="failed"), NOW)[0]
    assert row["detail"] == "exit 1"
    assert row["output"] == "(no output)"
    assert row["duration"] == "try 1: 12 ms ✗ · try 2: 9 ms ✗"
    detail = state.step_details_html(run_with([failed], state="failed"))
    assert "Step maybe failed: exit 1" in detail and "(the step wrote no output)" in detail


def test_the_detail_shows_tool_calls_folded_and_escapes_what_steps_wrote():
    agent = step(
        "think",
        "dispatch_task",
        "failed",
        why="<b>no</b>",
        tail="<script>alert(1)</script>",
        attempt_list=[attempt(1, 1, 2.5)],
        tool_calls=[
            {
                "turn": 1,
                "name": "run_command",
                "arguments": {"command": "echo '<img>'"},
                "result": "exit code 0\n<img>",
                "result_chars": 5000,
            }
        ],
    )
    detail = state.step_details_html(run_with([agent], state="failed"))
    assert "<script>" not in detail and "&lt;script&gt;" in detail
    assert "<img>" not in detail and "<b>no</b>" not in detail
    assert '<details class="tl-call">' in detail and "1 tool call</b>" in detail
    assert "&quot;command&quot;: &quot;echo &#x27;&lt;img&gt;&#x27;&quot;" in detail
    assert "4983 more characters" in detail  # 5,000 less the 17 shown
