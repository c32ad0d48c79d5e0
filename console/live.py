"""One live feed per console process: a thread LISTENs to the database's change feed and reads
conductor liveness twice a second, then fans both out to every open page.

Pages never poll the database on a timer of their own: N open pages cost one LISTEN connection
and one liveness query per half second, not N.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from engine_adapter.read.read_model import conductor_beat
from engine_adapter.store import db

log = logging.getLogger("threadline.console")

CHANNEL = "threadline_changes"
BEAT_EVERY_S = 0.5
GATHER_S = 0.03  # notifications arriving this close together go out as one change


@dataclass(frozen=True)
class Change:
    run_ids: frozenset[str] = frozenset()
    tables: frozenset[str] = frozenset()
    beat: dict[str, Any] | None = None  # set when liveness was read this turn

    @property
    def empty(self) -> bool:
        return not self.run_ids and not self.tables and self.beat is None


Subscriber = Callable[[Change], None]


@dataclass
class LiveHub:
    url: str | None = None
    _subscribers: dict[int, Subscriber] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next_id: int = 0
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    beat: dict[str, Any] | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="threadline-live", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reading and wait for the thread (it notices within a liveness interval)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        with self._lock:
            self._next_id += 1
            key = self._next_id
            self._subscribers[key] = fn

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers.pop(key, None)

        return unsubscribe

    def _publish(self, change: Change) -> None:
        with self._lock:
            subscribers = list(self._subscribers.values())
        for fn in subscribers:
            try:
                fn(change)
            except Exception:  # one broken page must not stop the feed for the others
                log.exception("live update failed")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except psycopg.Error as err:
                if self._stop.is_set():
                    return
                log.warning("live feed lost its connection (%s); reconnecting", err)
                self._stop.wait(1)

    def _listen(self) -> None:
        with db.connect(self.url) as listen_conn, db.connect(self.url) as read_conn:
            # The database says the feed only while some console follows it (migration 030).
            listen_conn.execute("select threadline.follow_feed()")
            listen_conn.execute(f"listen {CHANNEL}")
            next_beat = 0.0
            while not self._stop.is_set():
                run_ids: set[str] = set()
                tables: set[str] = set()
                wait = max(0.0, next_beat - time.monotonic())
                for note in listen_conn.notifies(timeout=wait, stop_after=1):
                    _collect(note.payload, run_ids, tables)
                if run_ids or tables:  # gather the rest of a burst
                    for note in listen_conn.notifies(timeout=GATHER_S):
                        _collect(note.payload, run_ids, tables)
                beat = None
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + BEAT_EVERY_S
                    beat = self.beat = conductor_beat(read_conn)
                change = Change(frozenset(run_ids), frozenset(tables), beat)
                if not change.empty:
                    self._publish(change)


def _collect(payload: str, run_ids: set[str], tables: set[str]) -> None:
    table, _, run_id = payload.partition(":")
    tables.add(table)
    if run_id:
        run_ids.add(run_id)


_hub: LiveHub | None = None
_hub_lock = threading.Lock()


def hub(url: str | None = None) -> LiveHub:
    """The process's one feed, started on first use (and again after it was stopped)."""
    global _hub
    with _hub_lock:
        if _hub is None or _hub._stop.is_set():
            _hub = LiveHub(url)
            _hub.start()
        return _hub
