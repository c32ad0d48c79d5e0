"""Helpers shared by the tests, the notebooks and the benchmarks: start and stop Threadline
processes against a database, and wait for a run to reach a state."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from engine_adapter.model.domain import FINISHED
from engine_adapter.model.settings import DATABASE_URL_ENV, HOME_ENV
from engine_adapter.read.read_model import show_run
from engine_adapter.sandbox.sandbox import RUNS_DIR_ENV, STEP_DIRS_ENV
from engine_adapter.sandbox.workdirs import WORKDIRS_ENV
from engine_adapter.store import db
from engine_adapter.store.embedded import free_port  # noqa: F401  (shared with tests, benchmarks and scripts)
from engine_adapter.store.workers import CRASH_ENV


def start_process(
    kind: str,
    url: str,
    home: Path,
    *,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
    args: Iterable[str] = (),
    step_dirs: Iterable[Path] = (),
    prefix: Iterable[str] = (),
    workdirs: Iterable[Path] = (),
) -> subprocess.Popen[bytes]:
    """Start `threadline conductor` or `threadline bots` against url; output goes to log_path
    (default home/<kind>.log). Under home: .threadline (THREADLINE_HOME) and runs (the runs'
    working directories); step_dirs are directories every step may write as well; workdirs are
    where a recipe's absolute workdir may lie; prefix runs the process through another command
    (e.g. `ip netns exec NAME`)."""
    inherited = {k: v for k, v in os.environ.items() if k != CRASH_ENV}  # crash only when asked
    layout = {
        DATABASE_URL_ENV: url,
        HOME_ENV: str(home / ".threadline"),  # ProcessSet.threadline_home
        RUNS_DIR_ENV: str(home / "runs"),
        STEP_DIRS_ENV: ":".join(map(str, step_dirs)),
        WORKDIRS_ENV: ":".join(map(str, workdirs)),
    }
    full_env = dict(inherited, **layout, **(env or {}))
    log_path = log_path or home / f"{kind}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", "engine_adapter.cli", kind, *args],
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def make_traversable(path: Path) -> None:
    """As root, steps run as an unprivileged user who must reach the runs' directories under a
    throwaway home: let everyone traverse (not list) it and the parents we own."""
    if os.geteuid() != 0:
        return
    tmp = Path(tempfile.gettempdir()).resolve()
    for p in (path, *path.parents):
        p = p.resolve()
        if p == tmp or (not p.is_relative_to(tmp) and p != path.resolve()):
            break
        p.chmod(p.stat().st_mode | 0o111)


def run_cli(
    url: str,
    *args: str,
    home: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`threadline ARGS` as a real subprocess against url (stdin: its standard input); output
    captured as text."""
    full_env = dict(os.environ, **{DATABASE_URL_ENV: url}, **(env or {}))
    if home:
        full_env[HOME_ENV] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "engine_adapter.cli", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
    )


def kill(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(timeout=30)


def wait_for(
    predicate: Any, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def wait_for_state(
    url: str, run_id: str, states: str | Iterable[str], timeout: float = 30.0
) -> dict[str, Any]:
    """Poll the read model until the run is in one of states; returns the run view."""
    wanted = {states} if isinstance(states, str) else set(states)
    with db.connect(url) as conn:
        seen: dict[str, Any] = {}

        def reached() -> dict[str, Any] | None:
            run = seen["run"] = show_run(conn, run_id)
            if run["state"] in FINISHED and run["state"] not in wanted:
                raise RunEndedElsewhere(_describe(run, wanted))
            return run if run["state"] in wanted else None

        try:
            return wait_for(reached, timeout, what=f"run {run_id} to be {'/'.join(sorted(wanted))}")
        except TimeoutError:
            raise TimeoutError(f"after {timeout}s: " + _describe(seen.get("run"), wanted)) from None


class RunEndedElsewhere(AssertionError):
    """The run ended in a state the caller was not waiting for."""


def _describe(run: dict[str, Any] | None, wanted: set[str]) -> str:
    if run is None:
        return "run not found"
    lines = [f"run {run['run_id']} is {run['state']}, not {'/'.join(sorted(wanted))}"]
    lines += [f"  step {s['id']}: {s['status']} ({s['attempts']} attempts)" for s in run["steps"]]
    lines += [
        f"  #{e['seq']} {e['author']} [{e['kind']}] {e['text'][:300]}" for e in run["thread"][-12:]
    ]
    return "\n".join(lines)


def alive_count(conn: psycopg.Connection[Any], kind: str) -> int:
    row = conn.execute(
        "select count(*) as n from threadline.live_workers where kind = %s", (kind,)
    ).fetchone()
    assert row is not None  # an aggregate returns one row
    return row["n"]


@contextmanager
def throwaway_server(prefix: str = "threadline-", home: Path | None = None) -> Iterator[str]:
    """An embedded PostgreSQL in a temp home (or the empty `home` given), removed (data included)
    on exit; yields its URL."""
    from engine_adapter.store.embedded import EmbeddedPostgres

    home = home or Path(tempfile.mkdtemp(prefix=prefix))
    server = EmbeddedPostgres(home)
    try:
        server.ensure_initialised()
        yield server.start()
    finally:
        remove_server(home)


def remove_server(home: Path, mode: str = "fast") -> None:
    """Stop the embedded server of a throwaway home and remove the home and its data."""
    from engine_adapter.store.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(home)
    # As root the data may live outside home (see embedded.py): note where before removing home.
    data_base = server.data_dir.parent
    try:
        server.stop(mode)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if not data_base.is_relative_to(home):
            shutil.rmtree(data_base, ignore_errors=True)


def answers(url: str) -> bool:
    """Whether an HTTP GET of url answers 200 now (a server still starting does not)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def with_dbname(url: str, name: str) -> str:
    """The same server URL, naming another database."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo("", **info)


class ProcessSet:
    """Conductor and bot processes started against one database; kill_all() ends every one.
    on_start, if given, hears of each process as soon as it is started."""

    def __init__(
        self,
        url: str,
        home: Path,
        on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
        step_dirs: Iterable[Path] = (),
        logins: dict[str, str] | None = None,
        prefix: Iterable[str] = (),
        workdirs: Iterable[Path] = (),
    ) -> None:
        self.url, self.home = url, home
        self.prefix = tuple(prefix)  # see start_process
        self.step_dirs = tuple(step_dirs)
        self.workdirs = tuple(workdirs)
        home.mkdir(parents=True, exist_ok=True)
        make_traversable(home)
        self.logins = logins or {}  # kind -> URL: a process connects as its kind's role
        self.procs: list[subprocess.Popen[bytes]] = []
        self.on_start = on_start

    @property
    def threadline_home(self) -> Path:
        """THREADLINE_HOME of the processes started here (see start_process)."""
        return self.home / ".threadline"

    def start(
        self,
        kind: str,
        env: dict[str, str] | None = None,
        args: Iterable[str] = (),
        wait: bool = False,
        timeout: float = 30.0,
    ) -> subprocess.Popen[bytes]:
        """Start a process; with wait, return once it holds its liveness lock (conductor, bots)."""
        proc = start_process(
            kind,
            self.logins.get(kind, self.url),
            self.home,
            env=env,
            args=args,
            step_dirs=self.step_dirs,
            prefix=self.prefix,
            workdirs=self.workdirs,
        )
        self.procs.append(proc)
        if self.on_start is not None:
            self.on_start(proc)
        if wait:
            self.wait_started(proc, kind, timeout)
        return proc

    def wait_started(self, proc: subprocess.Popen[bytes], kind: str, timeout: float = 30.0) -> None:
        """Until this very process holds its liveness lock; RuntimeError, with the logs, if it
        exits first."""
        params = dict(kind=kind, pid=proc.pid, host=socket.gethostname())
        with db.connect(self.url) as conn:
            wait_for(
                lambda: (
                    proc.poll() is not None
                    or db.fetch_row(conn, "live_worker_by_pid", params)["alive"]
                ),
                timeout,
                interval=0.02,
                what=f"{kind} process {proc.pid} to start",
            )
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} process exited with {proc.returncode}:\n{self.log_tails()}")

    def wait_alive(self, kind: str, count: int = 1, timeout: float = 30.0) -> None:
        """Until `count` processes of `kind` hold their liveness lock (they finished starting)."""
        with db.connect(self.url) as conn:
            wait_for(
                lambda: alive_count(conn, kind) >= count,
                timeout,
                interval=0.02,
                what=f"{count} live {kind} process(es)",
            )

    def kill_all(self) -> None:
        for proc in self.procs:
            try:
                kill(proc)
            except subprocess.TimeoutExpired:  # keep going: the others must die too
                pass

    def log_tails(self, lines: int = 40) -> str:
        out = []
        for path in sorted(self.home.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(out)
