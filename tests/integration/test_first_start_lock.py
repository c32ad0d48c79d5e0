"""A home's first start under its lock, and starting over: real `threadline` processes racing on
fresh homes, a home removed by hand, and `threadline reset`. Real initdb, pg_ctl and psycopg."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from engine_adapter.model.settings import DATABASE_URL_ENV, HOME_ENV
from engine_adapter.store.embedded import VAR_LIB, EmbeddedPostgres, remove_home, var_lib_base

CLI = [sys.executable, "-m", "engine_adapter.cli"]
# Commands a new user may type while `up` makes the home; each must wait, then work.
OTHERS = (["health"], ["runs"], ["recipe", "list"], ["db", "migrate"])
BROKEN = ("Traceback", "cannot be recovered", "initdb", "database error")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != DATABASE_URL_ENV}
    return env | {HOME_ENV: str(home)}


def _cli(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=_env(home), capture_output=True, text=True, input=stdin, timeout=180
    )


def _orphans(home: Path) -> list[Path]:
    base = var_lib_base(home)
    return sorted(VAR_LIB.glob(f"{base.name}.orphaned-*")) if VAR_LIB.is_dir() else []


@pytest.fixture
def homes() -> Iterator[list[Path]]:
    """Fresh homes (not yet made), each in a private temp dir; every trace removed after."""
    made: list[Path] = []
    yield made
    for home in made:
        if home.exists():
            remove_home(home)
        shutil.rmtree(var_lib_base(home), ignore_errors=True)
        for orphan in _orphans(home):
            EmbeddedPostgres(home).stop_data_dir(orphan / "pgdata")
            shutil.rmtree(orphan, ignore_errors=True)
        shutil.rmtree(home.parent, ignore_errors=True)


def _new_home(homes: list[Path], name: str) -> Path:
    home = Path(tempfile.mkdtemp(prefix="threadline-first-start-")) / name
    homes.append(home)
    return home


def _assert_works(home: Path) -> None:
    """Every login the credentials hold connects, and a command reads the home's workflows."""
    listing = _cli(home, "recipe", "list")
    assert listing.returncode == 0, listing.stderr
    assert "hello" in listing.stdout  # the examples `up` installed: the database `up` made
    creds = json.loads((home / "credentials.json").read_text())
    with psycopg.connect(creds["url"], connect_timeout=10) as conn:
        assert conn.execute("select count(*) from threadline.schema_migrations").fetchone()[0]
    for url in creds["roles"].values():  # the passwords stored are the ones the server has
        with psycopg.connect(url, connect_timeout=10) as conn:
            assert conn.execute("select 1").fetchone()[0] == 1


def _wait_line(path: Path, text: str, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        assert proc.poll() is None, f"`up` exited {proc.returncode}:\n{path.read_text()}"
        time.sleep(0.1)
    raise AssertionError(f"`up` never said {text!r}:\n{path.read_text()}")


def test_up_and_four_commands_at_once_on_a_fresh_home_ten_times(homes: list[Path]) -> None:
    for i in range(10):
        home = _new_home(homes, f"home{i}")
        log = home.parent / "up.log"
        with open(log, "w") as out:
            up = subprocess.Popen(
                [*CLI, "up", "--no-console", "--no-hooks"],
                env=_env(home),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        others = [
            subprocess.Popen(
                [*CLI, *args], env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            for args in OTHERS
        ]
        try:
            for args, proc in zip(OTHERS, others, strict=True):
                stdout, stderr = (s.decode() for s in proc.communicate(timeout=180))
                assert not any(b in stderr for b in BROKEN), f"{args} (round {i}):\n{stderr}"
                # health says `down` (no conductor yet: exit 1); the rest succeed.
                assert proc.returncode == (1 if args == ["health"] else 0), (args, stderr)
                if args == ["health"]:
                    assert "status:" in stdout
            _wait_line(log, "Threadline is up", up)
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(timeout=60)
        text = log.read_text()
        assert up.returncode == 0, text
        assert not any(b in text for b in BROKEN), text
        _assert_works(home)
        remove_home(home)


def _first_start(home: Path) -> dict:
    made = _cli(home, "db", "migrate")
    assert made.returncode == 0, made.stderr
    return json.loads((home / "credentials.json").read_text())


@pytest.mark.parametrize("how", ["stopped", "left-running", "credentials-lost"])
def test_removing_the_home_by_hand_then_starting_again(homes: list[Path], how: str) -> None:
    home = _new_home(homes, "home")
    first = _first_start(home)
    pg = EmbeddedPostgres(home)
    data = pg.data_dir
    if how != "left-running":  # `health` leaves the server it started running
        pg.stop()
    if how == "credentials-lost":  # the state the first start's race left behind
        (home / "credentials.json").unlink()
    else:  # rm -rf ~/.threadline: the data may live elsewhere (/var/lib as root)
        shutil.rmtree(home)
    again = _cli(home, "db", "migrate")
    assert again.returncode == 0, again.stderr
    second = json.loads((home / "credentials.json").read_text())
    assert second["password"] != first["password"]  # a new database, not the lost one
    with psycopg.connect(second["url"]) as conn:
        assert conn.execute("select count(*) from threadline.schema_migrations").fetchone()[0]
    assert "moved it aside" in again.stderr or how != "credentials-lost"
    if not data.is_relative_to(home):  # root: the old data was set aside, not destroyed
        (aside,) = _orphans(home)
        assert (aside / "pgdata" / "PG_VERSION").exists()
        assert (aside / "home").read_text().strip() == str(home)
        assert "moved it aside" in again.stderr
    elif how == "credentials-lost":
        assert [p.name.split("-")[0] for p in home.glob("pgdata.orphaned-*")] == ["pgdata.orphaned"]


def test_reset_asks_then_removes_the_home_and_its_data(homes: list[Path]) -> None:
    home = _new_home(homes, "home")
    _first_start(home)
    data = EmbeddedPostgres(home).data_dir
    assert data.exists()

    refused = _cli(home, "reset", stdin="no\n")
    assert refused.returncode == 1 and "nothing was removed" in refused.stderr
    assert (home / "credentials.json").exists() and data.exists()

    asked = _cli(home, "reset", stdin="yes\n")
    assert asked.returncode == 0, asked.stderr
    assert str(home) in asked.stdout
    assert not home.exists() and not data.exists()
    if not data.is_relative_to(home):
        assert not var_lib_base(home).exists() and not _orphans(home)

    _first_start(home)  # starts afresh
    assert _cli(home, "reset", "--yes").returncode == 0
    assert not home.exists() and not var_lib_base(home).exists()
