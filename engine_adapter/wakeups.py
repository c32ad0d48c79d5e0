"""Wake-ups for a process's worker threads, fed by one LISTEN connection per process.

A notification wakes one idle thread, not all of them, so an idle process runs one claim per
notification instead of one per thread (conductor executors, bot slots). A busy thread claims
again when it is done, until nothing is left; work that comes without a notification of its own
wakes as many threads as there is of it (a bot's claim says when another instruction was waiting;
the conductor counts the runs due by the clock).
"""

from __future__ import annotations

import threading

import psycopg

from . import db

POLL_S = 1.0  # a wake-up at least this often: work due by the clock, a notification missed


class Wake:
    def __init__(self, most: int) -> None:
        self._cond = threading.Condition()
        self._pending = 0
        self._most = most  # more pending wake-ups than threads would only spin them

    def signal(self, n: int = 1) -> None:
        with self._cond:
            self._pending = min(self._pending + n, self._most)
            self._cond.notify(n)

    def release_all(self) -> None:
        """Wake every waiting thread (the process is stopping)."""
        self.signal(self._most)

    def wait(self, timeout: float) -> None:
        with self._cond:
            if not self._pending:
                self._cond.wait(timeout)
            if self._pending:
                self._pending -= 1


def listen_forever(
    url: str | None, role: str, channel: str, wake: Wake, stop: threading.Event
) -> None:
    """Turn the process's notifications (and a poll each POLL_S) into wake-ups until `stop`.
    The listening connection is the thread's own; a lost database ends the loop and sets `stop`,
    so the process exits and its supervisor restarts it."""
    try:
        with db.connect(url, role=role) as conn:
            conn.execute(f"listen {channel}")
            while not stop.is_set():
                for _ in conn.notifies(timeout=POLL_S, stop_after=1):
                    pass
                wake.signal()
    except psycopg.OperationalError:
        stop.set()
    finally:
        wake.release_all()  # every waiting thread sees `stop`


def start_listener(
    url: str | None, role: str, channel: str, wake: Wake, stop: threading.Event
) -> threading.Thread:
    thread = threading.Thread(
        target=listen_forever, args=(url, role, channel, wake, stop), name="listener", daemon=True
    )
    thread.start()
    return thread
