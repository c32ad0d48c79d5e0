"""A failed step says why, wherever its status shows: its exit code, signal, timeout, the last
lines of what it wrote, and each attempt's own duration (not the wall time across retries)."""

from __future__ import annotations

import json
import time

import pytest

from engine_adapter.model.identity import Actor
from engine_adapter.read import step_report
from engine_adapter.runs import commands
from engine_adapter.runs.spawn import spawn
from engine_adapter.sandbox.sandbox import detect
from engine_adapter.testing import harness

RECIPE = """
slug: why-it-failed
steps:
  - id: killed
    run_command: kill -KILL $$
    on_failure: continue
  - id: slow
    run_command: sleep 30
    timeout: 1s
    retries: 1
    backoff: {initial: 1s, max: 1s}
    on_failure: continue
  - id: maybe
    run_command: |
      echo "checking the disk"
      for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "noise $i" >&2; done
      echo "disk is full" >&2
      exit 3
    retries: 1
    backoff: {initial: 2s, max: 2s}
"""


def test_a_failed_step_says_why_in_show_json_thread_and_cli(conn, apply, procs):
    apply(RECIPE)
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "why-it-failed").run_id
    harness.wait_for_state(procs.url, run_id, "failed", timeout=60)
    time.sleep(1.5)  # the failed run sits parked a while before `retry`: no attempt's time
    commands.retry_run(conn, run_id, Actor("tester", "cli"))
    harness.wait_for(
        lambda: (
            _show(procs.url, run_id)["steps"][2]["tries"] == 2
            and _show(procs.url, run_id)["state"] == "failed"
        ),
        timeout=60,
        what="the retried step to fail again",
    )
    view = _show(procs.url, run_id)
    killed, slow, maybe = view["steps"]

    assert killed["status"] == "failed"
    assert killed["why"] in ("killed by SIGKILL", "exit 137 (SIGKILL)"), killed["why"]
    assert slow["why"] == "timed out after 1s"
    # The retried attempt's why too (read back from its note), not the signal that ended it.
    assert [a["why"] for a in slow["attempt_list"]] == ["timed out after 1s"] * 2
    assert maybe["why"] == "exit 3" and maybe["exit_code"] == 3
    # The last lines of its output, bounded: stderr's last line in, its first lines out.
    assert maybe["tail"].endswith("disk is full")
    assert "noise 12" in maybe["tail"] and "checking the disk" not in maybe["tail"]
    # Each attempt with its own duration: two per try (the second 2 s after the first).
    attempts = maybe["attempt_list"]
    assert [(a["try"], a["attempt"], a["status"]) for a in attempts] == [
        (1, 1, "failed"),
        (1, 2, "failed"),
        (2, 1, "failed"),
        (2, 2, "failed"),
    ]
    assert all(a["exit_code"] == 3 and a["why"] == "exit 3" for a in attempts)
    assert all(a["duration_s"] < 1.5 for a in attempts), attempts
    assert maybe["duration_s"] == attempts[-1]["duration_s"]

    texts = [e["text"] for e in view["thread"]]
    parked = [t for t in texts if t.startswith('Step "maybe" failed (try 1)')]
    assert parked and parked[0].startswith('Step "maybe" failed (try 1): exit 3.')
    assert "disk is full" in parked[0]
    retried = [t for t in texts if t.startswith("Attempt 1 failed (exit 3)")]
    assert retried and "retrying in" in retried[0] and "disk is full" in retried[0]
    assert any(t == 'step "maybe" failed: exit 3' for t in texts)

    shown = harness.run_cli(procs.url, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "maybe" in out and "(exit 3)" in out
    assert "why: exit 3" in out and "| disk is full" in out
    assert "why: timed out after 1s" in out
    assert "try 1.1:" in out and "try 2.2:" in out


def _show(url: str, run_id: str) -> dict:
    shown = harness.run_cli(url, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def test_a_step_ended_by_its_limit_names_the_limit_everywhere(conn, apply, procs):
    """The limit step_guard reports is the step's why in show --json, show and the thread."""
    if detect().bwrap is None:
        pytest.skip("per-step limits need bubblewrap (apt-get install bubblewrap)")
    apply("""
slug: spins
steps:
  - id: spin
    run_command: |
      echo warming up >&2; python3 -c 'while True: pass'
    limits: {cpu: 1s}
    timeout: 60s
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "spins").run_id
    harness.wait_for_state(procs.url, run_id, "failed", timeout=90)
    step = _show(procs.url, run_id)["steps"][0]
    assert step["why"] == "cpu limit 1s reached", step
    assert step["attempt_list"][-1]["why"] == "cpu limit 1s reached"
    assert step["tail"].startswith("warming up")
    out = harness.run_cli(procs.url, "show", run_id).stdout
    assert "why: cpu limit 1s reached" in out and "| warming up" in out
    assert 'step "spin" failed: cpu limit 1s reached' in out


def test_a_step_that_could_not_start_says_why_in_its_own_words(conn, apply, procs):
    """No exit code: the bot's message (here, a bot with no model and no command) is the why."""
    apply("slug: no-agent\nbot: nobody\nsteps:\n  - id: ask\n    dispatch_task: look around\n")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "no-agent").run_id
    harness.wait_for_state(procs.url, run_id, "failed", timeout=60)
    view = _show(procs.url, run_id)
    step = view["steps"][0]
    first = step["output"].splitlines()[0]
    assert step["exit_code"] is None and first.startswith("bot 'nobody'")
    assert step["why"] == step["reason"] == step_report.one_line(first, 200)
    assert any(e["text"] == f'step "ask" failed: {step["why"]}' for e in view["thread"])
    assert "why: bot 'nobody'" in harness.run_cli(procs.url, "show", run_id).stdout
