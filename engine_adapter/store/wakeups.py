"""Wake-ups for a process's worker threads, fed by the host's shared listener (host_listener.py).

A notification wakes one idle thread, not all of them, so an idle process runs one claim per
notification instead of one per thread (conductor executors, bot slots). A busy thread claims
again when it is done, until nothing is left; work that comes without a notification of its own
wakes as many threads as there is of it (a bot's claim says when another instruction was waiting;
the conductor counts the runs due by the clock).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Protocol

import psycopg

from engine_adapter.store import db, host_listener

log = logging.getLogger("threadline.wakes")

POLL_S = 1.0  # a wake-up at least this often: work due by the clock, a notification missed


class Wake:
    def __init__(self, most: int) -> None:
        self._cond = threading.Condition()
        self._pending = 0
        self._waiting = 0  # threads idle in wait()
        self._most = most  # more pending wake-ups than threads would only spin them

    def signal(self, n: int = 1) -> None:
        with self._cond:
            self._pending = min(self._pending + n, self._most)
            self._cond.notify(n)

    def idle(self) -> int:
        """Idle threads no wake-up is on its way to: how many could take new work at once."""
        with self._cond:
            return self._waiting - self._pending

    def release_all(self) -> None:
        """Wake every waiting thread (the process is stopping)."""
        self.signal(self._most)

    def wait(self, timeout: float) -> None:
        with self._cond:
            if not self._pending:
                self._waiting += 1
                try:
                    self._cond.wait(timeout)
                finally:
                    self._waiting -= 1
            if self._pending:
                self._pending -= 1


@dataclass(frozen=True)
class Hold:
    event: threading.Event
    seconds: float

    def wait(self) -> bool:
        """True when the done notification came (or the hold was cut), False on time out."""
        return self.event.wait(self.seconds)


class HoldPolicy(Protocol):
    def hold(self, run_id: str) -> Hold | None:
        """Take the run's done notification (None: not now); call before the SEND commits."""

    def release(self, run_id: str) -> None: ...


class Holds:
    """Runs executors hold for a moment after a SEND, awaiting the step's done event, which the
    process's listener hands straight to them.

    A run that parks on its done event costs the engine a park, a wake, a claim and a replay of
    the run's checkpoints; a short command's done event often comes within milliseconds, so an
    executor with nothing else to do waits for it instead. The hold is an optimisation only: a
    run whose event comes late, or whose hold is cut, parks as before, and its await finds the
    event if it came meanwhile."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._held: dict[str, threading.Event] = {}

    def hold(self, run_id: str) -> Hold | None:
        """Take `run_id`'s done notification from now on (call before the SEND commits)."""
        if self.seconds <= 0:
            return None
        with self._lock:
            event = self._held[run_id] = threading.Event()
        return Hold(event, self.seconds)

    def release(self, run_id: str) -> None:
        with self._lock:
            self._held.pop(run_id, None)

    def deliver(self, run_id: str) -> bool:
        """Hand a done notification to the executor holding the run; False when none does."""
        with self._lock:
            event = self._held.pop(run_id, None)
        if event is None:
            return False
        event.set()
        return True

    def cut_all(self) -> None:
        """End every hold now (work waits with no idle thread to take it, or the process stops):
        each held run parks as it would have without a hold."""
        with self._lock:
            events, self._held = list(self._held.values()), {}
        for event in events:
            event.set()


def route_wake(payload: str, wake: Wake, holds: Holds) -> None:
    """A conductor's notification: a step done of a held run goes to the executor holding it
    (no claim needed); anything else wakes an idle executor, and when none is idle for it, the
    held runs park and make room."""
    what, run_id = db.parse_wake(payload)
    if what == db.STEP_DONE and holds.deliver(run_id):
        return
    wake.signal()
    if wake.idle() < 0:
        holds.cut_all()


def look_at_wake(payload: str, holds: Holds) -> None:
    """A conductor's notification another process acts on (host_listener.py): a step done of
    a run held here still goes to the executor holding it; nothing else wakes anyone."""
    what, run_id = db.parse_wake(payload)
    if what == db.STEP_DONE:
        holds.deliver(run_id)


def listen_forever(
    url: str | None, role: str, channel: str, wake: Wake, stop: threading.Event
) -> None:
    """Turn the process's notifications (and a poll each POLL_S) into wake-ups until `stop`.
    They come through the host's shared listener (host_listener.py); a lost database ends the
    loop and sets `stop`, so the process exits and its supervisor restarts it."""
    try:
        with host_listener.join(url, role, channel) as listener:
            while not stop.is_set():
                for _ in listener.notes(timeout=POLL_S, stop_after=1):
                    pass
                wake.signal()
    except Exception as err:  # the database lost, or the host's listener broken: exit
        if not isinstance(err, psycopg.OperationalError):
            log.exception("the listener failed; the process stops")
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
