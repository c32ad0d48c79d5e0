"""Connections whose wake-ups (NOTIFY) go out after their transaction commits, not in it.

A notifying transaction holds Postgres' one notify lock until its commit is flushed, so notifying
commits flush one at a time, server-wide (migration 030 says more). On these connections the
database's `threadline.wake` only hands each wake-up to the client as a notice; the connection
collects them and, once the transaction that made them has committed, hands them to its
database's sender: a thread of the process with a connection of its own, which sends whatever has
gathered in one short transaction that waits for no flush. The committing thread goes on at once,
and under load one transaction carries the wake-ups of many. A rollback drops them. At exit the
senders finish what they hold; a process killed before they sent it loses those wake-ups, and
its listeners find the work on their timers.

Every way a transaction ends on a psycopg connection passes here: a statement in autocommit (the
cursor's execute), a `transaction()` block, `commit()` and `rollback()`. A savepoint rolled back
inside a committed transaction keeps its wake-ups: one wake-up too many only makes a listener look
for work and find none.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq

log = logging.getLogger("threadline.db")

WAKE_NOTICE = "TLW01"  # threadline.wake's notice: message the payload, detail the channel
IDLE = pq.TransactionStatus.IDLE
SENDER_IDLE_S = 5.0  # a sender with nothing to send this long closes its connection and ends
EXIT_FLUSH_S = 2.0
Wakes = list[tuple[str, str]]  # (channel, payload)


class Sender:
    """Sends a database's wake-ups from a thread of its own, as many as have gathered at a time."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._cond = threading.Condition()
        self._queue: Wakes = []
        self._sending = False
        self._thread: threading.Thread | None = None

    def put(self, wakes: Wakes) -> None:
        with self._cond:
            self._queue.extend(wakes)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wake-sender", daemon=True)
                self._thread.start()
            self._cond.notify()

    def flush(self, timeout: float) -> None:
        """Wait until everything handed in so far has been sent (or `timeout` passed)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._sending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            while True:
                with self._cond:
                    if not self._queue:
                        self._cond.wait(SENDER_IDLE_S)
                    if not self._queue:
                        self._thread = None  # the next put starts another
                        return
                    wakes, self._queue = list(dict.fromkeys(self._queue)), []
                    self._sending = True
                try:
                    conn = conn or psycopg.connect(self.conninfo, autocommit=True)
                    conn.execute(
                        "select threadline.send_wakes(%s, %s)",
                        ([c for c, _ in wakes], [p for _, p in wakes]),
                    )
                except psycopg.Error as err:
                    log.warning("%d wake-up(s) not sent (%s); listeners will poll", len(wakes), err)
                    if conn is not None:
                        conn.close()
                    conn = None
                finally:
                    with self._cond:
                        self._sending = False
                        self._cond.notify_all()
        finally:
            if conn is not None:
                conn.close()


_senders: dict[str, Sender] = {}
_senders_lock = threading.Lock()


def sender(conninfo: str) -> Sender:
    """The process's sender for the database of `conninfo` (NOTIFY reaches one database)."""
    with _senders_lock:
        found = _senders.get(conninfo)
        if found is None:
            found = _senders[conninfo] = Sender(conninfo)
        return found


@atexit.register
def _flush_all() -> None:
    with _senders_lock:
        senders = list(_senders.values())
    for each in senders:
        each.flush(EXIT_FLUSH_S)


class WakingCursor(psycopg.Cursor[Any]):
    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> WakingCursor:
        conn = self.connection
        assert isinstance(conn, WakingConnection)
        try:
            super().execute(query, params, **kwargs)
        except BaseException:
            conn.statement_ended(committed=False)
            raise
        conn.statement_ended(committed=True)
        return self


class WakingConnection(psycopg.Connection[Any]):
    """Use `open`, not `connect`: it turns the deferral on."""

    _wakes: Wakes
    _sender: Sender

    @classmethod
    def open(cls, conninfo: str, autocommit: bool, **kwargs: Any) -> WakingConnection:
        conn = cls.connect(conninfo, autocommit=True, cursor_factory=WakingCursor, **kwargs)
        conn._wakes = []
        conn._sender = sender(conninfo)
        conn.add_notice_handler(conn._on_notice)
        # Notices must reach us whatever the role's or URL's default says.
        conn.execute("set threadline.wakes_after_commit = on; set client_min_messages = notice")
        conn.autocommit = autocommit
        return conn

    def _on_notice(self, diag: psycopg.errors.Diagnostic) -> None:
        if diag.sqlstate == WAKE_NOTICE:
            self._wakes.append((diag.message_detail or "", diag.message_primary or ""))

    def statement_ended(self, committed: bool) -> None:
        """After each statement: outside a transaction, it committed (or failed) on its own."""
        if self.info.transaction_status != IDLE or not self.autocommit:
            return  # the transaction's end decides
        if committed:
            self.send_wakes()
        else:
            self._wakes.clear()

    @contextmanager
    def transaction(self, *args: Any, **kwargs: Any) -> Iterator[psycopg.Transaction]:
        outermost = self.info.transaction_status == IDLE
        try:
            with super().transaction(*args, **kwargs) as tx:
                yield tx
        except BaseException:
            if outermost:
                self._wakes.clear()
            raise
        if outermost:
            if kwargs.get("force_rollback"):
                self._wakes.clear()
            else:
                self.send_wakes()

    def commit(self) -> None:
        super().commit()
        self.send_wakes()

    def rollback(self) -> None:
        super().rollback()
        self._wakes.clear()

    def send_wakes(self) -> None:
        """Hand what the committed transaction collected to the database's sender."""
        if self._wakes:
            wakes, self._wakes = self._wakes, []
            self._sender.put(wakes)
