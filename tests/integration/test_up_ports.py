"""Every port `threadline up` binds is movable (THREADLINE_CONSOLE_PORT, THREADLINE_HOOKS_PORT,
THREADLINE_PG_PORT), and its sign-in link is printed only once the console answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from engine_adapter.cli.supervisor import answers_http
from engine_adapter.model.settings import DATABASE_URL_ENV, HOME_ENV
from engine_adapter.store.embedded import remove_home
from engine_adapter.testing import harness


def test_up_moves_every_port_and_prints_the_link_once_the_console_answers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    console, hooks, pg = harness.free_port(), harness.free_port(), harness.free_port()
    env = {k: v for k, v in os.environ.items() if k != DATABASE_URL_ENV} | {
        HOME_ENV: str(home),
        "THREADLINE_CONSOLE_PORT": str(console),
        "THREADLINE_HOOKS_PORT": str(hooks),
        "THREADLINE_PG_PORT": str(pg),
    }
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "engine_adapter.cli", "up"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while f"console: http://127.0.0.1:{console}/?token=" not in log.read_text():
            assert up.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert answers_http(console)  # the link works the moment it is printed
        harness.wait_for(lambda: "Threadline is up" in log.read_text(), timeout=30, what="up")
        assert f"webhooks: http://127.0.0.1:{hooks}/hooks/<path>" in log.read_text()
        harness.wait_for(lambda: answers_http(hooks), timeout=60, what="the ingress")
        creds = json.loads((home / "credentials.json").read_text())
        assert creds["port"] == pg
        with psycopg.connect(creds["url"]) as conn:
            assert int(conn.execute("show port").fetchone()[0]) == pg
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)
        remove_home(home)
    assert up.returncode == 0, log.read_text()


def test_a_port_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != DATABASE_URL_ENV} | {
        HOME_ENV: str(tmp_path / "home"),
        "THREADLINE_PG_PORT": "54x",
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "engine_adapter.cli", "runs"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        remove_home(tmp_path / "home")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "threadline: THREADLINE_PG_PORT='54x': not a port (a number from 1 to 65535)"
    )
    assert "Traceback" not in done.stderr and "initdb" not in done.stderr
