"""Process liveness: each conductor and bot process holds an advisory lock for its lifetime and
heartbeats into threadline.workers. A process is alive while its lock is held, so a SIGKILL shows
at once (the server drops the lock with the connection)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from engine_adapter.store import db
from engine_adapter.store.roles import warn_if_superuser

LOCK_CLASS = 7411
HEARTBEAT_SECONDS = 2.0
VERSION = "0.1.0"
CRASH_ENV = "THREADLINE_CRASH_AT"
STOP_ENV = "THREADLINE_STOP_AT"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """SIGTERM and SIGINT as a request to stop, caught from before a process registers. One that
    came after the liveness lock but before the handlers would take the default action and kill
    the process unrecorded, so health would call a clean stop DEAD."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._then: Callable[[], None] | None = None
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._requested)

    def _requested(self, *_: object) -> None:
        self.event.set()
        if self._then is not None:
            self._then()

    def then(self, stop: Callable[[], None]) -> None:
        """Call `stop` on a request from now on, and at once for one that has already come."""
        self._then = stop
        if self.event.is_set():
            stop()


class Worker:
    """A registered process: holds its liveness lock and beats on a connection of its own."""

    def __init__(self, kind: str, url: str | None = None, sandbox: str | None = None) -> None:
        self.kind = kind
        self.host = socket.gethostname()
        self.id = f"{kind}-{self.host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._conn = db.connect(url, role=kind)
        warn_if_superuser(self._conn, kind)
        row = db.fetch_row(
            self._conn,
            "register_worker",
            dict(
                id=self.id,
                kind=kind,
                host=self.host,
                pid=os.getpid(),
                version=VERSION,
                sandbox=sandbox,
            ),
        )
        self.lock_key: int = row["lock_key"]  # its lock, taken by registering (migration 043)
        stop_point("registered")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"{kind}-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self._conn.execute(db.q("heartbeat_worker"), dict(id=self.id))
            except psycopg.Error:
                # Losing this connection loses the liveness lock: others now see us as dead and
                # may take over our work, so stop rather than run on as a zombie.
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def close(self) -> None:
        """A clean stop, which it records so that health says "stopped" rather than "DEAD"."""
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self._conn.execute(db.q("stop_worker"), dict(id=self.id))
        except psycopg.Error:  # its connection is gone: then it reads as dead, as it may be
            pass
        self._conn.close()


def list_workers(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return db.fetch_all(conn, "list_workers")


def crash_point(name: str) -> None:
    """Deterministic crash windows for tests: THREADLINE_CRASH_AT=name SIGKILLs this process
    here."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def stop_point(name: str) -> None:
    """Deterministic stop requests for tests: THREADLINE_STOP_AT=name sends this process a
    SIGTERM here, as `kill` or a service manager would."""
    if os.environ.get(STOP_ENV) == name:
        os.kill(os.getpid(), signal.SIGTERM)
