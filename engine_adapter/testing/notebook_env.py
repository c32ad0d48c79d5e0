"""A throwaway Threadline for one notebook: its own database, migrated, with conductor and bot
processes started and stopped on request, and everything removed at the end.

With THREADLINE_DATABASE_URL set, a fresh database is created on that server (and dropped at the
end), so a notebook never touches the data it names; otherwise an embedded PostgreSQL is started in
a temporary home. While the environment is open, THREADLINE_DATABASE_URL and THREADLINE_HOME in
this process point at it, so the CLI and the console's views find it too.

close() removes everything at once. Should this process die first (a kernel killed seconds after a
failing cell, too soon for atexit), a reaper does it: a detached process (`python -m
engine_adapter.testing.notebook_env --reap`) told over a pipe what to remove as it is created.
When the pipe closes without close() having said it is done, the reaper kills the processes,
drops the database or stops the embedded server, and removes the folders.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import psycopg

from engine_adapter.access import authorization
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.model.domain import FINISHED
from engine_adapter.model.settings import DATABASE_URL_ENV, HOME_ENV
from engine_adapter.read.read_model import show_run
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.run_ids import resolve_run_id
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db, roles, schema
from engine_adapter.testing import harness


class NotebookEnv:
    """Use as `with NotebookEnv() as env:` or `env = NotebookEnv().start()` ... `env.close()`."""

    def __init__(self, prefix: str = "threadline-nb-") -> None:
        self.prefix = prefix
        self.home: Path | None = None  # THREADLINE_HOME of the processes; workdir lives inside
        self.url: str | None = None
        self.conn: psycopg.Connection[Any] | None = None
        self.procs: harness.ProcessSet | None = None
        self.server_home: Path | None = None  # the embedded server's home, when there is one
        self._stack = ExitStack()
        self._saved_env: dict[str, str | None] = {}
        self._reaper: Reaper | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> NotebookEnv:
        # A kernel that exits after a failing cell cleans up at exit; one killed first, by the
        # reaper.
        atexit.register(self.close)
        try:
            self._reaper = reaper = Reaper()
            self.home = Path(tempfile.mkdtemp(prefix=self.prefix))
            reaper.tell(remove=str(self.home))
            self._stack.callback(shutil.rmtree, self.home, ignore_errors=True)
            given = os.environ.get(DATABASE_URL_ENV)
            self.url = (
                self._fresh_database(given, reaper) if given else self._embedded_server(reaper)
            )
            self.conn = self._stack.enter_context(db.connect(self.url))
            schema.migrate(self.conn)
            authorization.sync_rules(self.conn)
            logins = roles.grant_logins(self.conn)  # each process connects as its kind's role
            self._stack.callback(self._drop_logins)  # runs after the processes are gone
            # Steps run sandboxed (as an unprivileged user, when root): the scratch directory is
            # theirs to write, and the only one of ours they see.
            self.home.chmod(0o711)
            work = self.home / "work"
            work.mkdir(mode=0o777)
            work.chmod(0o777)
            self.procs = harness.ProcessSet(
                self.url,
                self.home,
                on_start=reaper.tell_process,
                step_dirs=[work],
                logins=logins,
                workdirs=[work],  # a recipe's absolute workdir may lie in the scratch directory
            )
            self._stack.callback(self.procs.kill_all)  # runs before the database goes away
            self._point_env_here()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> NotebookEnv:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill every process started here, drop the database or stop the server, remove the temp
        home and restore the environment. Safe to call twice."""
        atexit.unregister(self.close)
        removed = False
        try:
            self._stack.close()
            removed = True
        finally:
            for name, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            self._saved_env = {}
            if self._reaper is not None:  # if something was left, the reaper retries it now
                self._reaper.finish(removed)
                self._reaper = None

    def _embedded_server(self, reaper: Reaper) -> str:
        self.server_home = Path(tempfile.mkdtemp(prefix=self.prefix))
        reaper.tell(server_home=str(self.server_home))
        return self._stack.enter_context(harness.throwaway_server(home=self.server_home))

    def _fresh_database(self, server_url: str, reaper: Reaper) -> str:
        name = f"tl_nb_{uuid.uuid4().hex[:12]}"
        reaper.tell(drop=name, server_url=server_url)
        try:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(f"create database {name}")
        except psycopg.Error as err:
            raise RuntimeError(
                f"{DATABASE_URL_ENV} is set, but a throwaway database could not be "
                f"created on that server (its user needs CREATEDB): {err}"
            ) from err
        self._stack.callback(self._drop_database, server_url, name)
        return harness.with_dbname(server_url, name)

    def _drop_logins(self) -> None:
        if self.conn is not None and not self.conn.closed:
            try:
                roles.drop_logins(self.conn)
            except psycopg.Error:  # a server going away takes them along
                pass

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
        return self.procs.start(kind, wait=wait)  # wait: until it holds its liveness lock

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL: no clean-up code runs in the process, as in a real crash."""
        harness.kill(proc)

    def alive(self, kind: str) -> int:
        """How many conductor or bots processes hold their liveness lock now."""
        return harness.alive_count(self._db, kind)

    def logs(self, lines: int = 40) -> str:
        return self.procs.log_tails(lines) if self.procs else ""

    # -- workflows and runs -------------------------------------------------------------------
    @property
    def _db(self) -> psycopg.Connection[Any]:
        assert self.conn is not None, "call start() first"
        return self.conn

    @property
    def _url(self) -> str:
        assert self.url is not None, "call start() first"
        return self.url

    @property
    def workdir(self) -> Path:
        """A scratch directory for side effects, removed with everything else."""
        assert self.home is not None, "call start() first"
        return self.home / "work"

    def apply(self, recipe_yaml: str) -> str:
        """Apply a recipe given as YAML text; returns the workflow's slug."""
        return apply_recipe(self._db, load_recipe_text(recipe_yaml)).slug

    def spawn(self, slug: str, payload: dict[str, Any] | None = None) -> str:
        return spawn(self._db, slug, payload).run_id

    def wait(
        self, run_id: str, states: str | Iterable[str], timeout: float = 60.0
    ) -> dict[str, Any]:
        """Until the run is in one of states; returns the run view (raises with the thread if
        not)."""
        return harness.wait_for_state(self._url, resolve_run_id(self._db, run_id), states, timeout)

    def show(self, run_id: str) -> dict[str, Any]:
        """A run's view; run_id is the id or a unique prefix of it."""
        return show_run(self._db, resolve_run_id(self._db, run_id))

    def follow(
        self, run_id: str, timeout: float = 60.0, interval: float = 0.1
    ) -> Iterator[tuple[str, dict[str, Any] | None]]:
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
        return db.fetch_row(self._db, "db_now")["now"]


# -- the reaper ---------------------------------------------------------------------------------
class Reaper:
    """The detached process that removes what a NotebookEnv made if the NotebookEnv's process dies
    before close(). Each tell() is one JSON line on the reaper's stdin, sent before the thing it
    names is created; finish() ends it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine_adapter.testing.notebook_env", "--reap"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
        )  # out of the kernel's process group, which is killed with it
        assert self.proc.stdin is not None  # stdin=PIPE
        self.stdin = self.proc.stdin

    def tell(self, **item: Any) -> None:
        try:
            self.stdin.write(json.dumps(item).encode() + b"\n")
            self.stdin.flush()
        except (OSError, ValueError):  # the reaper is gone: close() still cleans up
            pass

    def tell_process(self, proc: subprocess.Popen[bytes]) -> None:
        self.tell(pid=proc.pid, started=_started(proc.pid))

    def finish(self, removed: bool) -> None:
        """removed: everything is gone, the reaper just exits; otherwise it removes what is left."""
        if removed:
            self.tell(done=True)
        try:
            self.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5 if removed else 60)
        except subprocess.TimeoutExpired:  # still working: it carries on detached
            pass


def _started(pid: int) -> str | None:
    """When a process started (clock ticks since boot, from /proc): with the pid, who it is, so a
    reused pid is never killed."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def reap(items: list[dict[str, Any]]) -> None:
    """Remove what the items name: processes first, then databases and servers, then folders."""
    order = ("pid", "drop", "server_home", "remove")
    for item in sorted(
        items, key=lambda item: next(i for i, key in enumerate(order) if key in item)
    ):
        for tries_left in (2, 1, 0):  # e.g. a server still starting up, or a connection refused
            try:
                if "pid" in item:
                    _kill_if_same(item["pid"], item["started"])
                elif "drop" in item:
                    NotebookEnv._drop_database(item["server_url"], item["drop"])
                elif "server_home" in item:
                    harness.remove_server(Path(item["server_home"]), mode="immediate")
                else:
                    shutil.rmtree(item["remove"], ignore_errors=True)
                break
            except Exception:
                if tries_left:
                    time.sleep(1)


def _kill_if_same(pid: int, started: str | None) -> None:
    if started is not None and _started(pid) == started:
        os.kill(pid, signal.SIGKILL)


def _reap_when_orphaned(stream: IO[bytes]) -> None:
    """Read what to remove until the pipe closes; remove it unless told that close() did."""
    items = []
    for line in stream:
        item = json.loads(line)
        if item.get("done"):
            return
        items.append(item)
    reap(items)


if __name__ == "__main__" and sys.argv[1:] == ["--reap"]:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the notebook is not for us
    _reap_when_orphaned(sys.stdin.buffer)
