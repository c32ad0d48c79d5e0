"""`threadline up` as a new user runs it: its own PostgreSQL, the example recipes, supervised
children restarted when killed, the console page, Ctrl-C stops everything, data kept."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from engine_adapter.sandbox.sandbox import detect
from engine_adapter.store import db
from engine_adapter.store.embedded import EmbeddedPostgres
from engine_adapter.testing import harness


def threadline(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "THREADLINE_DATABASE_URL"}
    env["THREADLINE_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "engine_adapter.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def start_up(home: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "THREADLINE_DATABASE_URL"}
    env["THREADLINE_HOME"] = str(home)
    log = open(home / "up.log", "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "engine_adapter.cli", "up", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_up_runs_everything_and_restarts_what_dies(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    port = harness.free_port()
    up = start_up(home, port)
    try:
        harness.wait_for(
            lambda: "Threadline is up" in (home / "up.log").read_text(),
            timeout=90,
            what="threadline up",
        )
        creds = json.loads((home / "credentials.json").read_text())
        assert oct((home / "credentials.json").stat().st_mode & 0o777) == "0o600"
        assert oct(home.stat().st_mode & 0o777) == "0o700"  # it was made 0755 above
        assert f"steps run {detect().describe()}" in (home / "up.log").read_text()
        # The examples' agent steps have no model yet: `up` and `health` say so, in one line.
        said = [
            line
            for line in (home / "up.log").read_text().splitlines()
            if "agents: bots investigator, shell have no model" in line
        ]
        assert len(said) == 1 and "threadline bot apply" in said[0]
        assert "agents: bots investigator, shell have no model" in threadline(home, "health").stdout
        assert set(creds["roles"]) == {"conductor", "bots", "console", "hooks", "viewer"}
        assert (
            "hello" in threadline(home, "recipe", "list").stdout
        )  # examples installed on first start
        run_id = threadline(
            home, "spawn", "hello", "--payload", '{"name": "new user"}'
        ).stdout.strip()
        view = harness.wait_for_state(creds["url"], run_id, "completed", timeout=60)
        assert view["steps"][0]["output"].strip() == "hello new user"

        with db.connect(creds["url"]) as conn:
            users = {
                r["usename"]
                for r in conn.execute(
                    "select usename from pg_stat_activity where backend_type = 'client backend' "
                    "and pid <> pg_backend_pid()"
                )
            }
            assert {
                "threadline.conductor",
                "threadline.bots",
            } <= users and "threadline" not in users
            conductor = conn.execute(
                "select pid from threadline.live_workers where kind = 'conductor'"
            ).fetchone()
            os.kill(conductor["pid"], signal.SIGKILL)
            restarted = harness.wait_for(
                lambda: conn.execute(
                    "select pid from threadline.live_workers"
                    " where kind = 'conductor' and pid <> %s",
                    (conductor["pid"],),
                ).fetchone(),
                timeout=15,
                what="the supervisor to restart the conductor",
            )
            assert restarted["pid"] != conductor["pid"]
        assert "conductor exited with -9; restarting" in (home / "up.log").read_text()

        page = harness.wait_for(
            lambda: _get(f"http://127.0.0.1:{port}/"), timeout=60, what="the console"
        )
        assert "Threadline" in page
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0
    assert "embedded PostgreSQL stopped" in (home / "up.log").read_text()
    assert not EmbeddedPostgres(home).is_running()

    # Starting again finds everything intact.
    up = start_up(home, harness.free_port())
    try:
        harness.wait_for(
            lambda: (home / "up.log").read_text().count("Threadline is up") == 2,
            timeout=90,
            what="second start",
        )
        shown = json.loads(threadline(home, "show", run_id, "--json").stdout)
        assert shown["state"] == "completed"
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)
        data_base = EmbeddedPostgres(home).data_dir.parent
        if not data_base.is_relative_to(home):  # as root the data lives outside home
            shutil.rmtree(data_base, ignore_errors=True)


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except OSError:
        return None


def test_up_refuses_a_console_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = threadline(tmp_path, "up", "--port", str(port))
    assert result.returncode == 2
    assert f"console port {port} on 127.0.0.1 is in use" in result.stderr
    assert not (tmp_path / "credentials.json").exists()  # nothing was started
