"""NotebookEnv: a throwaway Threadline per notebook, on the given server or an embedded one, that
leaves nothing behind (processes, database, temp home, environment)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import uuid

import psycopg
import pytest

from engine_adapter.model.settings import DATABASE_URL_ENV, HOME_ENV
from engine_adapter.store import db
from engine_adapter.testing import harness
from engine_adapter.testing.notebook_env import NotebookEnv, Reaper

TOUCH = """
slug: touch
steps:
  - id: touch
    run_command: touch {{payload.dir}}/touched && echo touched
"""


def databases(server_url: str) -> set[str]:
    with psycopg.connect(server_url, autocommit=True) as admin:
        return {r[0] for r in admin.execute("select datname from pg_database")}


def test_env_on_the_given_server_uses_a_database_of_its_own(server_url, monkeypatch, tmp_path):
    monkeypatch.setenv(DATABASE_URL_ENV, server_url)
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "users-home"))
    env = NotebookEnv().start()
    name = psycopg.conninfo.conninfo_to_dict(env.url)["dbname"]
    assert name.startswith("tl_nb_") and name in databases(server_url)
    assert os.environ[DATABASE_URL_ENV] == env.url and os.environ[HOME_ENV] == str(env.home)

    conductor, bots = env.start_conductor(), env.start_bots()
    assert env.alive("conductor") == 1 and env.alive("bots") == 1
    run_id = env.spawn(env.apply(TOUCH), {"dir": str(env.workdir)})
    followed = list(env.follow(run_id, timeout=30))
    assert followed[-1][0] == "completed"
    entries = [e for _, e in followed if e is not None]
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    assert entries[-1]["text"] == "Run completed."
    assert (env.workdir / "touched").exists()
    assert env.now().tzinfo is not None

    home = env.home
    env.close()
    assert conductor.poll() is not None and bots.poll() is not None
    assert name not in databases(server_url)
    assert not home.exists()
    assert os.environ[DATABASE_URL_ENV] == server_url and os.environ[HOME_ENV] == str(
        tmp_path / "users-home"
    )
    env.close()  # a second close is harmless


def test_env_without_a_url_starts_and_removes_its_own_server(monkeypatch):
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    with NotebookEnv() as env:
        url, home = env.url, env.home
        assert (
            env.conn.execute("select count(*) as n from threadline.schema_migrations").fetchone()[
                "n"
            ]
            > 0
        )
        env.start_conductor()
        assert env.alive("conductor") == 1
    assert DATABASE_URL_ENV not in os.environ
    assert not home.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=3).close()


def test_env_refuses_clearly_when_it_cannot_create_its_database(server_url, monkeypatch):
    role = f"tl_nocreate_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"create role {role} login password 'pw' nocreatedb")
    try:
        info = psycopg.conninfo.conninfo_to_dict(server_url)
        info.update(user=role, password="pw")
        limited = psycopg.conninfo.make_conninfo(**info)
        monkeypatch.setenv(DATABASE_URL_ENV, limited)
        before = databases(server_url)
        env = NotebookEnv()
        with pytest.raises(RuntimeError, match=f"{DATABASE_URL_ENV} is set.*CREATEDB"):
            env.start()
        assert not env.home.exists()
        assert os.environ[DATABASE_URL_ENV] == limited
        assert databases(server_url) == before
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f"drop role {role}")


def test_the_reaper_removes_what_it_was_told_of_when_its_pipe_closes_early(server_url, tmp_path):
    folder = tmp_path / "made"
    folder.mkdir()
    name = f"tl_nb_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    ours, someone_elses = subprocess.Popen(["sleep", "300"]), subprocess.Popen(["sleep", "300"])
    try:
        reaper = Reaper()
        reaper.tell(remove=str(folder))
        reaper.tell(drop=name, server_url=server_url)
        reaper.tell_process(ours)
        reaper.tell(pid=someone_elses.pid, started="0")  # the pid now names another process
        reaper.proc.stdin.close()  # as when the process that started it dies
        assert reaper.proc.wait(timeout=60) == 0
        assert ours.wait(timeout=10) == -signal.SIGKILL
        assert someone_elses.poll() is None
        assert not folder.exists() and name not in databases(server_url)
    finally:
        for proc in (ours, someone_elses):
            harness.kill(proc)


def test_the_reaper_leaves_everything_once_close_said_it_is_done(tmp_path):
    folder = tmp_path / "kept"
    folder.mkdir()
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        reaper = Reaper()
        reaper.tell(remove=str(folder))
        reaper.tell_process(sleeper)
        reaper.finish(removed=True)
        assert reaper.proc.returncode == 0
        assert folder.exists() and sleeper.poll() is None
    finally:
        harness.kill(sleeper)


def test_process_set_start_waits_for_that_process_and_fails_early_if_it_exits(db_url, tmp_path):
    procs = harness.ProcessSet(db_url, tmp_path)
    try:
        conductor = procs.start("conductor", wait=True)
        with db.connect(db_url) as conn:
            live = db.fetch_one(
                conn,
                "live_worker_by_pid",
                dict(kind="conductor", pid=conductor.pid, host=socket.gethostname()),
            )
        assert live["alive"]
        # It exits at once (a bad flag): the wait says so with its log, long before its timeout.
        with pytest.raises(RuntimeError, match=r"(?s)bots process exited with 2.*no-such-flag"):
            procs.start("bots", args=["--no-such-flag"], wait=True, timeout=600)
    finally:
        procs.kill_all()
