"""Crash proofs: SIGKILL the conductor or a bot anywhere; every step runs exactly once (bot
attempts aside, which are visible), no instruction appears twice, and the run completes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from engine_adapter.model.identity import Actor
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

THREE_STEPS = """
slug: three
steps:
  - id: one
    run_command: echo one >> {{payload.dir}}/side && sleep {{payload.nap}}
  - id: two
    run_command: echo two >> {{payload.dir}}/side
  - id: three
    run_command: echo three >> {{payload.dir}}/side
"""


def side_effects(tmp_path: Path) -> list[str]:
    path = tmp_path / "side"
    return path.read_text().split() if path.exists() else []


def assert_clean_thread(view: dict) -> None:
    instructions = [e["step_key"] for e in view["thread"] if e["kind"] == "instruction"]
    assert len(instructions) == len(set(instructions)), instructions
    terminals = [e["step_key"] for e in view["thread"] if e["kind"].startswith("signal.dispatch.")]
    assert len(terminals) == len(set(terminals)), terminals
    assert [e["seq"] for e in view["thread"]] == list(range(1, len(view["thread"]) + 1))


def test_conductor_sigkill_while_bot_finishes_the_step(conn, apply, procs, tmp_path):
    apply(THREE_STEPS)
    conductor = procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "three", {"dir": str(tmp_path), "nap": 2}).run_id
    key = f"{run_id}:one:1"
    harness.wait_for(
        lambda: conn.execute(
            "select 1 from threadline.step_claims where step_key = %s", (key,)
        ).fetchone(),
        what="bot to claim step one",
    )
    harness.kill(conductor)
    harness.wait_for(
        lambda: harness.alive_count(conn, "conductor") == 0,
        timeout=1.0,
        what="the killed conductor to show as dead",
    )
    # The bot finishes the step and emits its done event while no conductor is alive.
    event = harness.wait_for(
        lambda: conn.execute(
            "select emitted_at from absurd.e_threadline"
            " where event_name = %s and payload is not null",
            (f"threadline.step.done:{key}",),
        ).fetchone(),
        what="done event with no conductor",
    )
    last_beat = conn.execute(
        "select max(last_beat_at) as t from threadline.workers where kind = 'conductor'"
    ).fetchone()["t"]
    assert event["emitted_at"] > last_beat
    assert harness.alive_count(conn, "conductor") == 0
    procs.start("conductor")
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert side_effects(tmp_path) == ["one", "two", "three"]
    assert [s["attempts"] for s in view["steps"]] == [1, 1, 1]
    assert_clean_thread(view)


@pytest.mark.parametrize(
    "kind, point, attempts, effects",
    [
        # The conductor dies right after its instruction commits, or after its SEND checkpoint.
        ("conductor", "after_send", 1, ["one", "two", "three"]),
        ("conductor", "after_send_checkpoint", 1, ["one", "two", "three"]),
        ("bots", "bot_after_claim", 2, ["one", "two", "three"]),
        ("bots", "bot_after_terminal", 1, ["one", "two", "three"]),
        # The command ran but the bot died before it could say so: attempt 2 runs it again, visibly.
        ("bots", "bot_before_terminal", 2, ["one", "one", "two", "three"]),
    ],
)
def test_crash_points(conn, apply, procs, tmp_path, kind, point, attempts, effects):
    apply(THREE_STEPS)
    procs.start("bots" if kind == "conductor" else "conductor")
    doomed = procs.start(kind, env={"THREADLINE_CRASH_AT": point})
    run_id = spawn(conn, "three", {"dir": str(tmp_path), "nap": 0}).run_id
    assert doomed.wait(timeout=30) == -signal.SIGKILL
    procs.start(kind)
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert side_effects(tmp_path) == effects
    assert view["steps"][0]["attempts"] == attempts
    assert any("Attempt 2 of step one" in e["text"] for e in view["thread"]) == (attempts == 2)
    assert_clean_thread(view)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return True
    return state == "Z"


def host_pids(marker: str) -> list[int]:
    """Processes whose command line holds marker. A step runs in a process namespace of its own,
    so the pid it could report ($!) is not the host's."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes() and not _gone(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_bot_killed_mid_command_retried_as_attempt_2_with_old_group_gone(
    conn, apply, procs, tmp_path
):
    # The first attempt's child holds a lock until it dies: the second attempt sees it free only
    # if the successor bot killed the old process group before starting it.
    apply("""
slug: long
steps:
  - id: work
    run_command: |
      cd {{payload.dir}}
      if [ -f marker ]; then
        if flock -n child.lock true; then echo old-gone; else echo OLD-STILL-ALIVE; fi
        echo "key=$THREADLINE_STEP_KEY"
      else
        touch marker
        flock {{payload.dir}}/child.lock sleep 300 &
        wait
      fi
""")
    procs.start("conductor")
    bots = procs.start("bots")
    run_id = spawn(conn, "long", {"dir": str(tmp_path)}).run_id
    lock = f"{tmp_path}/child.lock"
    children = harness.wait_for(lambda: host_pids(lock), what="the command's child to start")
    harness.kill(bots)
    procs.start("bots")
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    step = view["steps"][0]
    assert step["attempts"] == 2
    assert "old-gone" in step["output"] and f"key={run_id}:work:1" in step["output"]
    assert all(_gone(child) for child in children)


def test_cancel_reaches_a_running_command(conn, apply, procs, tmp_path):
    from engine_adapter.runs.commands import cancel_run

    apply("""
slug: sleeper
steps:
  - id: wait
    run_command: |
      cd {{payload.dir}}
      trap 'sleep 0.5; echo TERM > terminated; exit 143' TERM
      flock {{payload.dir}}/child.lock sleep 300 &
      wait
  - id: never
    run_command: touch {{payload.dir}}/never
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "sleeper", {"dir": str(tmp_path)}).run_id
    children = harness.wait_for(
        lambda: host_pids(f"{tmp_path}/child.lock"), what="the command to start"
    )
    cancel_run(conn, run_id, Actor("tester", "console"), "changed my mind")
    view = harness.wait_for_state(procs.url, run_id, "cancelled", timeout=10)
    harness.wait_for(
        lambda: all(_gone(c) for c in children),
        timeout=15,
        what="the cancelled command's processes to die",
    )
    harness.wait_for(
        lambda: (
            conn.execute(
                "select outcome from threadline.step_claims where run_id = %s", (run_id,)
            ).fetchone()["outcome"]
            == "cancelled"
        ),
        what="claim closed",
    )
    assert not (tmp_path / "never").exists()
    # It was asked to stop first (SIGTERM, which its trap saw), and given time to (the trap
    # takes half a second): not killed outright, nor with its sandbox at once.
    assert (tmp_path / "terminated").read_text() == "TERM\n"
    # The step it stopped shows cancelled; the one never reached, skipped.
    assert [s["status"] for s in view["steps"]] == ["cancelled", "skipped"]
    assert view["thread"][-1]["text"] == "Run cancelled by tester: changed my mind"
    assert db.fetch_one(conn, "engine_task", dict(run_id=run_id))["state"] == "cancelled"


def test_retry_resumes_failed_run_at_failed_step(conn, apply, procs, tmp_path):
    from engine_adapter.runs.commands import CommandRefused, retry_run

    apply("""
slug: flaky
steps:
  - id: one
    run_command: echo one >> {{payload.dir}}/side
  - id: two
    run_command: test -f {{payload.dir}}/flag && echo two >> {{payload.dir}}/side
  - id: three
    run_command: echo three >> {{payload.dir}}/side
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "flaky", {"dir": str(tmp_path)}).run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=30)
    assert [s["status"] for s in view["steps"]] == ["completed", "failed", "pending"]
    (tmp_path / "flag").touch()
    retry_run(conn, run_id, Actor("tester", "console"))
    with pytest.raises(CommandRefused):
        retry_run(conn, run_id, Actor("tester", "console"))  # not failed any more
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert side_effects(tmp_path) == ["one", "two", "three"]
    assert view["steps"][1]["tries"] == 2
    assert os.path.exists(tmp_path / "flag")
    assert_clean_thread(view)


def test_a_bot_stopped_gracefully_mid_command_loses_nothing(conn, apply, procs, tmp_path):
    """SIGTERM (Ctrl-C on `up`) kills the running command, but that is not the step's failure:
    the next bot runs it again as attempt 2 and the run completes."""
    apply("""
slug: interrupted
steps:
  - id: work
    run_command: |
      cd {{payload.dir}}
      if [ -f started ]; then echo second-time; else touch started; sleep 300; fi
""")
    procs.start("conductor")
    bots = procs.start("bots", wait=True)
    run_id = spawn(conn, "interrupted", {"dir": str(tmp_path)}).run_id
    harness.wait_for(lambda: (tmp_path / "started").exists(), what="the command to start")
    harness.kill(bots, signal.SIGTERM)
    assert bots.returncode == 0
    procs.start("bots")
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert view["steps"][0]["attempts"] == 2 and "second-time" in view["steps"][0]["output"]
    assert not any(e["kind"] == "signal.dispatch.failed" for e in view["thread"])
