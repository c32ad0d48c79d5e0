"""A throwaway Threadline for one notebook: its own database, migrated, with conductor and bot
processes started and stopped on request, and everything removed at the end.

With THREADLINE_DATABASE_URL set, a fresh database is created on that server (and dropped at the
end), so a notebook never touches the data it names; otherwise an embedded PostgreSQL is started in
a temporary home. While the environment is open, THREADLINE_DATABASE_URL and THREADLINE_HOME in
this process point at it, so the CLI and the console's views find it too.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

import psycopg

from . import db, harness, schema
from .read_model import FINISHED, show_run
from .recipes import load_recipe_text
from .settings import DATABASE_URL_ENV, HOME_ENV
from .spawn import spawn
from .workflows import apply_recipe


class NotebookEnv:
    """Use as `with NotebookEnv() as env:` or `env = NotebookEnv().start()` ... `env.close()`."""

    def __init__(self, prefix: str = "threadline-nb-") -> None:
        self.prefix = prefix
        self.home: Path | None = None  # THREADLINE_HOME of the processes; workdir lives inside
        self.url: str | None = None
        self.conn: psycopg.Connection[Any] | None = None
        self.procs: harness.ProcessSet | None = None
        self._stack = ExitStack()
        self._saved_env: dict[str, str | None] = {}

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "NotebookEnv":
        # Registered first: a kernel that exits after a failing cell still cleans up.
        atexit.register(self.close)
        try:
            self.home = Path(tempfile.mkdtemp(prefix=self.prefix))
            self._stack.callback(shutil.rmtree, self.home, ignore_errors=True)
            given = os.environ.get(DATABASE_URL_ENV)
            self.url = self._fresh_database(given) if given else self._stack.enter_context(
                harness.throwaway_server(prefix=self.prefix))
            self.conn = self._stack.enter_context(db.connect(self.url))
            schema.migrate(self.conn)
            self.procs = harness.ProcessSet(self.url, self.home)
            self._stack.callback(self.procs.kill_all)  # runs before the database goes away
            self._point_env_here()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> "NotebookEnv":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill every process started here, drop the database or stop the server, remove the temp
        home and restore the environment. Safe to call twice."""
        atexit.unregister(self.close)
        try:
            self._stack.close()
        finally:
            for name, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            self._saved_env = {}

    def _fresh_database(self, server_url: str) -> str:
        name = f"tl_nb_{uuid.uuid4().hex[:12]}"
        try:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(f"create database {name}")
        except psycopg.Error as err:
            raise RuntimeError(f"{DATABASE_URL_ENV} is set, but a throwaway database could not be "
                               f"created on that server (its user needs CREATEDB): {err}") from err
        self._stack.callback(self._drop_database, server_url, name)
        return harness.with_dbname(server_url, name)

    @staticmethod
    def _drop_database(server_url: str, name: str) -> None:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f"drop database if exists {name} with (force)")

    def _point_env_here(self) -> None:
        for name, value in ((DATABASE_URL_ENV, self.url), (HOME_ENV, str(self.home))):
            self._saved_env[name] = os.environ.get(name)
            os.environ[name] = str(value)

    # -- processes ----------------------------------------------------------------------------
    def start_conductor(self, wait: bool = True) -> subprocess.Popen[bytes]:
        return self._start("conductor", wait)

    def start_bots(self, wait: bool = True) -> subprocess.Popen[bytes]:
        return self._start("bots", wait)

    def _start(self, kind: str, wait: bool) -> subprocess.Popen[bytes]:
        assert self.procs is not None, "call start() first"
        proc = self.procs.start(kind)
        if wait:  # until it holds its liveness lock, so it is visibly up
            params = dict(kind=kind, pid=proc.pid, host=socket.gethostname())
            harness.wait_for(lambda: proc.poll() is not None or db.fetch_one(
                self.conn, "live_worker_by_pid", params)["alive"], what=f"{kind} process {proc.pid} to start")
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} process exited with {proc.returncode}:\n{self.logs()}")
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL: no clean-up code runs in the process, as in a real crash."""
        harness.kill(proc)

    def alive(self, kind: str) -> int:
        """How many conductor or bots processes hold their liveness lock now."""
        return harness.alive_count(self.conn, kind)

    def logs(self, lines: int = 40) -> str:
        return self.procs.log_tails(lines) if self.procs else ""

    # -- workflows and runs -------------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        """A scratch directory for side effects, removed with everything else."""
        assert self.home is not None, "call start() first"
        path = self.home / "work"
        path.mkdir(exist_ok=True)
        return path

    def apply(self, recipe_yaml: str) -> str:
        """Apply a recipe given as YAML text; returns the workflow's slug."""
        return apply_recipe(self.conn, load_recipe_text(recipe_yaml)).slug

    def spawn(self, slug: str, payload: dict[str, Any] | None = None) -> str:
        return spawn(self.conn, slug, payload).run_id

    def wait(self, run_id: str, states: str | Iterable[str], timeout: float = 60.0) -> dict[str, Any]:
        """Until the run is in one of states; returns the run view (raises with the thread if not)."""
        return harness.wait_for_state(self.url, run_id, states, timeout)

    def show(self, run_id: str) -> dict[str, Any]:
        return show_run(self.conn, run_id)

    def follow(self, run_id: str, timeout: float = 60.0,
               interval: float = 0.1) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """Watch a run: yields (state, entry) for each new thread entry, and (state, None) when
        only the state changed, until the run finishes (TimeoutError after timeout seconds)."""
        seen, last_state = 0, None
        deadline = time.monotonic() + timeout
        while True:
            view = self.show(run_id)
            fresh = view["thread"][seen:]
            seen += len(fresh)
            if not fresh and view["state"] != last_state:
                yield view["state"], None
            for entry in fresh:
                yield view["state"], entry
            last_state = view["state"]
            if view["state"] in FINISHED:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {view['state']} after {timeout}s")
            time.sleep(interval)

    def now(self) -> datetime:
        """The database clock, which every recorded time in the frames comes from."""
        return db.fetch_one(self.conn, "db_now")["now"]
