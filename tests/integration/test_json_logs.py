"""THREADLINE_LOG_FORMAT=json: the conductor, bots, ingress and console processes, started for
real, write one JSON object per line, every line, and a request that starts a run carries the
run's id as a field of its own, as does a bot's failed attempt with its step and attempt."""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path

from engine_adapter import connect
from engine_adapter.testing import harness

JSON = {"THREADLINE_LOG_FORMAT": "json"}
RECIPE = """
slug: logged
webhooks:
  - path: logged
steps:
  - id: hello
    run_command: echo hello
"""
BREAKS = """
slug: breaks
steps:
  - id: work
    run_command: exit 3
"""
FIELDS = {"time", "level", "logger", "message", "process", "pid"}


def records(path: Path) -> list[dict]:
    """Every line of a log, each parsed as JSON (a line that is not fails the test here)."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert lines, f"{path.name} is empty"
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"{path.name}: not a JSON line: {line!r}") from None
    return out


def test_every_line_of_every_process_is_json_and_a_run_names_its_id(procs, apply, db_url):
    apply(RECIPE)
    apply(BREAKS)
    procs.start("conductor", env=JSON, wait=True)
    procs.start("bots", env=JSON, wait=True)
    port = harness.free_port()
    procs.start("console", env=JSON, args=["--port", str(port)])
    procs.start("hooks", args=["--port", "0", "--log-format", "json"])  # the flag, not the env
    hooks_log = procs.home / "hooks.log"
    found = harness.wait_for(
        lambda: (
            hooks_log.exists()
            and re.search(r"listening on http://\S+?:(\d+)/", hooks_log.read_text())
        ),
        timeout=60,
        what="the ingress to listen",
    )
    harness.wait_for(
        lambda: harness.answers(f"http://127.0.0.1:{port}/api/v1/openapi.json"),
        timeout=90,
        interval=0.3,
        what="the console to serve",
    )
    request = urllib.request.Request(
        f"http://127.0.0.1:{found.group(1)}/hooks/logged",
        data=b"{}",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        run = json.loads(response.read())["run_id"]
    harness.wait_for_state(db_url, run, "completed")
    broken = connect(url=db_url, write=True).spawn("breaks")
    harness.wait_for_state(db_url, broken, "failed")
    for proc in procs.procs:  # a clean stop logs too
        proc.send_signal(signal.SIGTERM)
    for proc in procs.procs:
        proc.wait(30)

    for kind in ("conductor", "bots", "hooks", "console"):
        lines = records(procs.home / f"{kind}.log")
        for line in lines:
            assert FIELDS <= line.keys() and line["process"] == kind, line
        assert any(line["level"] == "INFO" for line in lines), kind
    started = [r for r in records(hooks_log) if r.get("run_id") == run]
    assert len(started) == 1 and "/hooks/logged" in started[0]["message"], started
    (failed,) = [r for r in records(procs.home / "bots.log") if r.get("run_id") == broken]
    assert failed["step"] == "work" and failed["attempt"] == 1, failed
    assert failed["step_key"] == f"{broken}:work:1" and "exit" in failed["message"], failed
    said = " ".join(r["message"] for r in records(procs.home / "console.log"))
    assert f"http://127.0.0.1:{port}/" in said  # its address, printed, is a record too
