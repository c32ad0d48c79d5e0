"""A run of every step kind end to end, with real conductor and bot processes."""

from __future__ import annotations

from engine_adapter.model.identity import Actor
from engine_adapter.runs import gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

RECIPE = """
slug: every-kind
env: [GREETING]
steps:
  - id: build
    run_command: echo "$GREETING" {{payload.who}} && \
echo "run=$THREADLINE_RUN_ID key=$THREADLINE_STEP_KEY"
  - id: ask-agent
    dispatch_task: "summarise: {{steps.build.output}}"
  - id: nap
    sleep: 1s
  - id: ok
    human_gate: "Ship {{payload.who}}?"
  - id: after
    run_command: echo approved-with {{steps.ok.output}}
"""


def test_every_step_kind_runs_to_completion(conn, apply, procs):
    apply(RECIPE)
    # Steps run as an unprivileged user: a system interpreter, not the test's own (under /root).
    agent = "python3 -c \"import sys; print('AGENT SAYS: ' + sys.stdin.read().upper())\""
    procs.start("conductor")
    procs.start(
        "bots", env={"GREETING": "hello", "THREADLINE_AGENT_CMD": agent, "SECRET_NOT_PASSED": "x"}
    )
    run_id = spawn(conn, "every-kind", {"who": "o'brien; rm -rf /"}).run_id

    view = harness.wait_for_state(procs.url, run_id, "waiting", timeout=30)
    statuses = {s["id"]: s["status"] for s in view["steps"]}
    assert statuses == {
        "build": "completed",
        "ask-agent": "completed",
        "nap": "completed",
        "ok": "gate",
        "after": "pending",
    }
    build = view["steps"][0]["output"]
    assert "hello o'brien; rm -rf /" in build  # a variable reference: the value was one argument
    assert f"run={run_id} key={run_id}:build:1" in build
    assert view["steps"][1]["output"].startswith("AGENT SAYS: SUMMARISE: HELLO O'BRIEN")

    gates.reply(conn, run_id, "👍 looks good", Actor("alice", "console"))
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert view["steps"][-1]["output"].strip() == "approved-with 👍 looks good"
    kinds = [e["kind"] for e in view["thread"]]
    assert kinds.count("instruction") == 3 and kinds.count("question") == 1
    assert [e["seq"] for e in view["thread"]] == list(range(1, len(view["thread"]) + 1))
    assert view["thread"][-1]["text"] == "Run completed."


def test_step_environment_is_clean(conn, apply, procs):
    apply("""
slug: env-check
steps:
  - id: env
    run_command: env | sort
""")
    procs.start("conductor")
    procs.start("bots", env={"SECRET_NOT_PASSED": "x"})
    run_id = spawn(conn, "env-check").run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    output = view["steps"][0]["output"]
    assert "THREADLINE_STEP_KEY=" in output
    assert "SECRET_NOT_PASSED" not in output
    assert "THREADLINE_DATABASE_URL" not in output and "postgresql://" not in output


def test_unresolved_placeholder_fails_step_naming_the_path(conn, apply, procs):
    apply("""
slug: bad-path
steps:
  - id: one
    run_command: echo {{payload.missing.deep}}
""")
    procs.start("conductor")
    run_id = spawn(conn, "bad-path", {"other": 1}).run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=30)
    assert view["steps"][0]["status"] == "failed"
    assert "payload.missing" in view["steps"][0]["output"]
    assert not any(e["kind"] == "instruction" for e in view["thread"])


def test_dispatch_without_backend_fails_with_how_to_configure(conn, apply, procs):
    apply("""
slug: no-agent
bot: helper
steps:
  - id: think
    dispatch_task: think hard
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "no-agent").run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=30)
    assert "THREADLINE_AGENT_CMD_HELPER" in view["steps"][0]["output"]


def test_bot_side_retries_timeout_and_output_cap(conn, apply, procs, tmp_path):
    apply("""
slug: limits
steps:
  - id: flaky
    run_command: |
      n=$(cat {{payload.dir}}/count 2>/dev/null || echo 0); echo $((n+1)) > {{payload.dir}}/count
      [ "$n" -ge 2 ] && echo third-time-lucky
    retries: 2
  - id: slow
    run_command: sleep 60
    timeout: 1s
    on_failure: continue
  - id: chatty
    run_command: head -c 200000 /dev/zero
  - id: wake
    sleep_until: "{{payload.wake}}"
""")
    procs.start("conductor")
    procs.start("bots")
    wake = conn.execute("select (now() + interval '1 second') as t").fetchone()["t"].isoformat()
    run_id = spawn(conn, "limits", {"dir": str(tmp_path), "wake": wake}).run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    flaky, slow, chatty, woke = view["steps"]
    assert (flaky["status"], flaky["attempts"]) == ("completed", 3)
    assert flaky["output"].strip() == "third-time-lucky"
    assert sum("retrying in" in e["text"] for e in view["thread"]) == 2
    assert slow["status"] == "failed" and "timed out after 1s" in slow["output"]
    assert chatty["output"].startswith("\ufffd" * 1000)  # NUL bytes stored as U+FFFD
    assert "[134464 more bytes of output dropped]" in chatty["output"]
    assert woke["status"] == "completed"


def test_long_commands_stream_progress_and_short_ones_just_reply(conn, apply, procs):
    apply("""
slug: streaming
steps:
  - id: quick
    run_command: echo quick
  - id: slow
    run_command: echo first; sleep 1.5; echo second
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "streaming").run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    progress = {
        key: [e["text"] for e in view["thread"] if e["kind"] == "progress" and e["step_key"] == key]
        for key in (f"{run_id}:quick:1", f"{run_id}:slow:1")
    }
    assert progress[f"{run_id}:quick:1"] == []
    streamed = "".join(progress[f"{run_id}:slow:1"])
    assert streamed.split() == ["first", "second"]
    first_seq = next(e["seq"] for e in view["thread"] if e["kind"] == "progress")
    terminal_seq = next(
        e["seq"]
        for e in view["thread"]
        if e["kind"].startswith("signal.") and e["step_key"] == f"{run_id}:slow:1"
    )
    assert first_seq < terminal_seq


def test_agent_that_answers_before_reading_a_large_instruction(conn, apply, procs):
    apply("""
slug: big-dispatch
steps:
  - id: think
    dispatch_task: "{{payload.big}}"
""")
    procs.start("conductor")
    # Writes a full pipe's worth before it reads: a bot that fed stdin inline would deadlock here.
    agent = "head -c 300000 /dev/zero | tr '\\\\0' x; wc -c > received"
    procs.start("bots", env={"THREADLINE_AGENT_CMD": agent})
    run_id = spawn(conn, "big-dispatch", {"big": "y" * 200_000}).run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert "more bytes of output dropped" in view["steps"][0]["output"]
    received = procs.home / "runs" / run_id / "received"  # the default per-run directory
    assert int(received.read_text()) == 200_000  # the whole instruction arrived


def test_retry_on_retries_only_the_failures_it_names(conn, apply, procs, tmp_path):
    """Exit 75 is retried (after the backoff's first wait), exit 3 is not; a timeout is not
    when only exit codes are named."""
    apply("""
slug: classes
steps:
  - id: flaky
    run_command: |
      n=$(cat {{payload.dir}}/count 2>/dev/null || echo 0); echo $((n+1)) > {{payload.dir}}/count
      [ "$n" -eq 0 ] && exit 75
      exit 3
    retries: 5
    retry_on: [75]
    backoff: {initial: 1s, max: 2s}
    on_failure: continue
  - id: slow
    run_command: sleep 60
    timeout: 1s
    retries: 5
    retry_on: [failure]
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "classes", {"dir": str(tmp_path)}).run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=60)
    flaky, slow = view["steps"]
    assert (flaky["status"], flaky["attempts"], flaky["exit_code"]) == ("failed", 2, 3)
    assert (tmp_path / "count").read_text().strip() == "2"  # 75 retried once; 3 not retried
    assert (slow["status"], slow["attempts"]) == ("failed", 1)  # a timeout is no `failure`
    waits = [e["text"] for e in view["thread"] if "retrying in" in e["text"]]
    assert len(waits) == 1 and "exit 75" in waits[0]


def test_a_lost_attempt_is_run_again_only_when_retry_on_names_lost(conn, apply, procs, tmp_path):
    """SIGKILL of the bot mid-command: the step whose retry_on names `lost` runs again (and the
    lost attempt spends none of its retries); the one whose retry_on leaves it out fails, saying
    why, and its command never starts a second time."""
    apply("""
slug: lost-classes
steps:
  - id: once
    run_command: echo started >> {{payload.dir}}/once; sleep 300
    retries: 3
    retry_on: [timeout]
    on_failure: continue
  - id: again
    run_command: |
      echo started >> {{payload.dir}}/again
      [ "$(wc -l < {{payload.dir}}/again)" -gt 1 ] || sleep 300
    retries: 0
    retry_on: [75, lost]
""")
    procs.start("conductor")
    bots = procs.start("bots")
    run_id = spawn(conn, "lost-classes", {"dir": str(tmp_path)}).run_id
    harness.wait_for(lambda: (tmp_path / "once").exists(), what="step once to start")
    harness.kill(bots)
    bots = procs.start("bots")
    harness.wait_for(lambda: (tmp_path / "again").exists(), what="step again to start")
    harness.kill(bots)
    procs.start("bots")
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    once, again = view["steps"]
    assert (once["status"], once["attempts"]) == ("failed", 2)
    assert "retry_on does not name lost" in once["output"]
    assert (tmp_path / "once").read_text() == "started\n"  # never started again
    assert (again["status"], again["attempts"]) == ("completed", 2)  # retries: 0, yet run again
    assert (tmp_path / "again").read_text() == "started\nstarted\n"
