"""Connections whose wake-ups (NOTIFY) go out after their transaction commits, not in it.

A notifying transaction holds Postgres' one notify lock until its commit is flushed, so notifying
commits flush one at a time, server-wide (migration 030 says more). On these connections the
database's `threadline.wake` only hands each wake-up to the client as a notice; the connection
collects them and, once the transaction that made them has committed, sends them on the same
connection in one short transaction that waits for no flush. A rollback drops them. A process
killed between the two loses those wake-ups, and its listeners find the work on their timers.
(A sender thread per process, batching the wake-ups of all its threads, was tried: every
short-lived process then opened one connection more and the test suite ran a third slower, and
under load it showed no gain over this beyond the noise.)

A wake-up that a process of this host can take goes to it directly, not through the database
(meeting.hand_over): a step's done wake-up only where the conductor holding its run, if one does,
is on this host too (the notice's hint names the holder's host, migration 059).

Every way a transaction ends on a psycopg connection passes here: a statement in autocommit (the
cursor's execute), a `transaction()` block, `commit()` and `rollback()`. A savepoint rolled back
inside a committed transaction keeps its wake-ups: one wake-up too many only makes a listener look
for work and find none.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq

from engine_adapter.store import meeting

log = logging.getLogger("threadline.db")

WAKE_NOTICE = "TLW01"  # threadline.wake's notice: message the payload, detail the channel
IDLE = pq.TransactionStatus.IDLE
Wakes = list[tuple[str, str, str]]  # (channel, payload, the host of the run's holder or "")


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
    _database: str  # its database_key: where the host's processes of it meet (meeting.py)

    @classmethod
    def open(cls, conninfo: str, autocommit: bool, **kwargs: Any) -> WakingConnection:
        conn = cls.connect(conninfo, autocommit=True, cursor_factory=WakingCursor, **kwargs)
        conn._wakes = []
        conn._database = meeting.database_key(conninfo)
        conn.add_notice_handler(conn._on_notice)
        # Notices must reach us whatever the role's or URL's default says.
        conn.execute("set threadline.wakes_after_commit = on; set client_min_messages = notice")
        conn.autocommit = autocommit
        return conn

    def _on_notice(self, diag: psycopg.errors.Diagnostic) -> None:
        if diag.sqlstate == WAKE_NOTICE:
            wake = (diag.message_detail or "", diag.message_primary or "", diag.message_hint or "")
            self._wakes.append(wake)

    def statement_ended(self, committed: bool) -> None:
        """After each statement: outside a transaction, it committed (or failed) on its own."""
        if self.info.transaction_status != IDLE or not self.autocommit:
            return  # the transaction's end decides
        if committed:
            self.send_wakes()
        else:
            self._wakes.clear()

    @contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[psycopg.Transaction]:
        outermost = self.info.transaction_status == IDLE
        try:
            with super().transaction(savepoint_name, force_rollback) as tx:
                yield tx
        except BaseException:
            if outermost:
                self._wakes.clear()
            raise
        if outermost:
            if force_rollback:
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
        """Send what the committed transaction collected, each wake-up once: to a process of
        this host where one takes it, else through the database. A failure here cannot undo the
        commit, and a listener finds the work on its timer: say so and go on."""
        if not self._wakes:
            return
        wakes, self._wakes = list(dict.fromkeys(self._wakes)), []
        here = socket.gethostname()
        wakes = [
            (channel, payload, holder)
            for channel, payload, holder in wakes
            if holder not in ("", here) or not meeting.hand_over(self._database, channel, payload)
        ]
        if not wakes:
            return
        params = ([channel for channel, _, _ in wakes], [payload for _, payload, _ in wakes])
        try:
            if self.autocommit:
                self.execute("select threadline.send_wakes(%s, %s)", params)
            else:
                with self.transaction():
                    self.execute("select threadline.send_wakes(%s, %s)", params)
        except psycopg.Error as err:
            log.warning("%d wake-up(s) not sent (%s); listeners will poll", len(wakes), err)
