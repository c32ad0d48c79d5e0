"""THREADLINE_LOG_FORMAT=json: the conductor, bots, ingress and console processes, started for
real, write one JSON object per line, every line, and a request that starts a run carries the
run's id as a field of its own, as do a bot's failed attempt (with its step and attempt) and the
conductor's line as a run ends."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from engine_adapter import connect
from engine_adapter.cli.supervisor import answers_http
from engine_adapter.model.logs import LOG_FORMAT_ENV
from engine_adapter.model.settings import DATABASE_URL_ENV, HOME_ENV
from engine_adapter.store.embedded import remove_home
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
    ended = {r["run_id"]: r for r in records(procs.home / "conductor.log") if "run_id" in r}
    assert ended[run]["workflow"] == "logged" and ended[run]["message"].endswith("completed")
    assert ended[broken]["step"] == "work" and "failed at step work" in ended[broken]["message"]
    said = " ".join(r["message"] for r in records(procs.home / "console.log"))
    assert f"http://127.0.0.1:{port}/" in said  # its address, printed, is a record too


def test_up_with_the_flag_logs_json_and_so_do_the_processes_it_starts(tmp_path: Path) -> None:
    """`threadline up --log-format json`: its own lines, the embedded database's set-up and
    every process it starts (conductor, bots, console, ingress) write JSON lines only."""
    home = tmp_path / "home"
    console = harness.free_port()
    env = {k: v for k, v in os.environ.items() if k not in (DATABASE_URL_ENV, LOG_FORMAT_ENV)} | {
        HOME_ENV: str(home),
        "THREADLINE_CONSOLE_PORT": str(console),
        "THREADLINE_HOOKS_PORT": str(harness.free_port()),
        "THREADLINE_PG_PORT": str(harness.free_port()),
    }
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "engine_adapter.cli", "up", "--log-format", "json"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        harness.wait_for(
            lambda: up.poll() is not None or "Threadline is up" in log.read_text(),
            timeout=120,
            what="up",
        )
        harness.wait_for(lambda: answers_http(console), timeout=60, what="the console")
        harness.wait_for(
            lambda: {r["process"] for r in records(log)} >= {"up", "conductor", "bots", "hooks"},
            timeout=30,
            what="every process to log",
        )
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)
        remove_home(home)
    lines = records(log)
    assert {r["process"] for r in lines} == {"up", "conductor", "bots", "hooks", "console"}
    assert all(FIELDS <= r.keys() for r in lines)
