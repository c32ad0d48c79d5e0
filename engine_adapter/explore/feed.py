"""A client's change feed for live widgets: one thread LISTENs on the database's channels and
tells each widget which runs changed, so a widget redraws without its cell being run again.

It follows the same feed the console does (threadline_changes, said while some login follows
it) where the login may follow it, and always the conductors' channel (spawns, steps done,
decisions), which any login may LISTEN to. A tick every TICK_S redraws what no notice covers
(heartbeats, a run's last step) at the cost of one small read per widget.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from engine_adapter.store import db

log = logging.getLogger("threadline.explore")

CHANGES = "threadline_changes"  # the console's change feed (migration 004)
TICK_S = 2.0
GATHER_S = 0.05  # notices this close together make one redraw

# run ids that changed (empty on a tick: anything may have)
Subscriber = Callable[[frozenset[str]], None]


class Feed:
    def __init__(self, url: str) -> None:
        self.url = url
        self._subscribers: dict[int, Subscriber] = {}
        self._lock = threading.Lock()
        self._next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        with self._lock:
            self._next += 1
            key = self._next
            self._subscribers[key] = fn
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run, name="threadline-widgets", daemon=True
                )
                self._thread.start()

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers.pop(key, None)

        return unsubscribe

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _publish(self, run_ids: frozenset[str]) -> None:
        with self._lock:
            subscribers = list(self._subscribers.values())
        for fn in subscribers:
            try:
                fn(run_ids)
            except Exception:  # one broken widget must not stop the others' updates
                log.exception("widget update failed")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except psycopg.Error as err:
                log.warning("widget feed lost its connection (%s); reconnecting", err)
                self._stop.wait(1)

    def _listen(self) -> None:
        with db.connect(self.url) as conn:
            try:
                conn.execute("select threadline.follow_feed()")
            except psycopg.errors.InsufficientPrivilege:
                # A database before migration 050 (its viewer may not follow the feed): the
                # conductors' channel and the tick still cover every run.
                pass
            conn.execute(f"listen {CHANGES}")
            conn.execute(f"listen {db.NOTIFY_CHANNEL}")
            while not self._stop.is_set():
                run_ids: set[str] = set()
                for note in conn.notifies(timeout=TICK_S, stop_after=1):
                    _collect(note, run_ids)
                if run_ids:  # gather the rest of a burst (after the first wait has let go)
                    for note in conn.notifies(timeout=GATHER_S):
                        _collect(note, run_ids)
                self._publish(frozenset(run_ids))


def _collect(note: Any, run_ids: set[str]) -> None:
    run_id = note.payload.partition(":")[2]
    if run_id:
        run_ids.add(run_id)
