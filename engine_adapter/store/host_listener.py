"""One LISTEN connection per host, database and OS user, shared by that host's processes.

Postgres signals every listening backend of a database on each NOTIFY, whatever the channel, and
each idle listener then reads the queue in a transaction of its own: a commit per listener per
notification (docs/speed.md). So the processes of one host share one listener. They meet in a
directory of their own (mode 0700: a step's command, run as another user or in a sandbox, never
reaches it); whoever holds the lock file there (flock, freed by the kernel when its holder dies,
SIGKILL too) listens on every channel the others bound a socket for, and forwards each
notification to them as a datagram. The others wait on their sockets and try the lock at least
every POLL_S, so when the leader dies another takes over within about a second. A notification
lost meanwhile costs only time: every process also looks for work on a POLL_S timer.

One process acts on each notification: a wake-up asks for one claim, and woken in every
process it made every one of them claim, all but one finding nothing. The leader names one
subscriber of the channel in turn to act on it (its `notes`); the others only look at it (their
`looker`, if they gave one: a conductor hands a step's done event to the executor holding that
run, wherever it is held, and wakes no one else).

`THREADLINE_HOST_LISTENER=off` (or a directory that is not safely ours) makes each process
listen on its own connection and act on every notification, as before.
"""

from __future__ import annotations

import collections
import fcntl
import logging
import os
import secrets
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from engine_adapter.model.settings import database_url
from engine_adapter.store import db, meeting

log = logging.getLogger("threadline.wakes")

APP_NAME = "threadline host-listener"  # the shared listening connection, in pg_stat_activity
POLL_S = 1.0  # a member tries the lock at least this often
LOCK_NAME = "leader.lock"
INBOX_MOST = 1024  # notes not yet taken; older ones go (a lost wake-up costs only time)


class HostListener:
    """A process's notifications on `channels`: `notes(timeout)` yields their payloads.

    Shared (the default): a thread of this object's own either leads (holds the lock, listens,
    forwards) or reads the member socket; either way the notes land in an inbox `notes` reads.
    Direct (off, or no safe directory): a connection of its own, read by `notes` itself, as a
    process listened before. A lost database raises psycopg.OperationalError from `notes`."""

    def __init__(
        self,
        url: str | None,
        role: str,
        channels: list[str],
        looker: Callable[[str], None] | None = None,
    ) -> None:
        for channel in channels:
            if not channel.isidentifier():
                raise ValueError(f"channel {channel!r}: not a plain identifier")
        self.shared = meeting.enabled()  # a bad setting opens nothing
        self.url, self.role, self.channels = url, role, list(channels)
        self.looker = looker  # called on the listener's thread with a note another acts on
        self._turns: dict[str, int] = collections.Counter()  # per channel: who acts next
        self._closed = False
        self._conn: psycopg.Connection[Any] | None = None
        self._listening: set[str] = set()
        self._error: BaseException | None = None
        self._inbox: collections.deque[str] = collections.deque(maxlen=INBOX_MOST)
        self._cond = threading.Condition()
        self._lock_fd: int | None = None
        self._sock: socket.socket | None = None
        self._sock_path: Path | None = None
        self._thread: threading.Thread | None = None
        self._stop_r, self._stop_w = os.pipe()  # wakes the thread's select when closing
        self.dir: Path | None = None
        if self.shared:
            try:
                self._join()
            except OSError as err:
                log.warning("wake-ups: listening on a connection of this process's own (%s)", err)
                self._leave()
                self.shared = False
        try:
            if not self.shared:
                self._conn = db.connect(url, role=role)
                self._listen(self.channels)
                return
            if self.leading:  # the first to come connects now: a database out of reach fails here
                self._lead_start()
        except BaseException:
            self._close_conn()
            self._leave()
            os.close(self._stop_r)
            os.close(self._stop_w)
            raise
        self._thread = threading.Thread(target=self._run, name="host-listener", daemon=True)
        self._thread.start()

    # -- the caller's side ----------------------------------------------------------------------
    @property
    def leading(self) -> bool:
        return self._lock_fd is not None

    def notes(self, timeout: float, stop_after: int | None = None) -> Iterator[str]:
        """Payloads of the notifications that come within `timeout` s (at most `stop_after`)."""
        if not self.shared:
            assert self._conn is not None
            for note in self._conn.notifies(timeout=timeout, stop_after=stop_after):
                yield note.payload
            return
        deadline = time.monotonic() + timeout
        taken = 0
        while stop_after is None or taken < stop_after:
            with self._cond:
                while not self._inbox and self._error is None and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._cond.wait(left)
                if self._error is not None:
                    raise self._error
                if not self._inbox:
                    return  # closed
                payload = self._inbox.popleft()
            taken += 1
            yield payload

    def close(self) -> None:
        """Leave: the socket unlinked, the lock released (another process takes over)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        os.write(self._stop_w, b"x")
        if self._thread is not None:
            if self._thread is not threading.current_thread():
                self._thread.join(timeout=5)  # it leaves on its own (a statement in flight ends)
        else:
            self._close_conn()
            self._leave()
        if self._thread is None or not self._thread.is_alive():
            os.close(self._stop_r)
            os.close(self._stop_w)

    def __enter__(self) -> HostListener:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- joining and leaving --------------------------------------------------------------------
    def _join(self) -> None:
        url = self.url or database_url(self.role)
        self.dir = meeting.meeting_dir(url)
        name = "+".join(sorted(self.channels)) + f".{os.getpid()}.{secrets.token_hex(4)}"
        path = self.dir / (name + meeting.SOCK_SUFFIX)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(str(path))  # a path too long for AF_UNIX fails here
        except OSError:
            sock.close()
            raise
        self._sock, self._sock_path = sock, path
        self._try_lock()

    def _leave(self) -> None:
        if self._sock_path is not None:
            try:
                self._sock_path.unlink()
            except FileNotFoundError:
                pass
            self._sock_path = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _try_lock(self) -> bool:
        assert self.dir is not None
        fd = os.open(self.dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    # -- the thread: from start to close it alone touches the socket, the lock and the connection
    def _run(self) -> None:
        try:
            while not self._closed:
                if not self.leading:
                    self._follow()
                    continue
                if self._conn is None:
                    self._lead_start()
                self._lead()
        except BaseException as err:
            if not self._closed:
                log.warning("wake-ups: the host's listener stopped: %s", err)
                with self._cond:
                    self._error = err
                    self._cond.notify_all()
        finally:
            self._close_conn()
            self._leave()

    def _follow(self) -> None:
        """Take the leader's datagrams; try the lock whenever POLL_S passed since the last try."""
        assert self._sock is not None
        sock = self._sock
        next_try = time.monotonic() + POLL_S
        while not self._closed:
            ready, _, _ = select.select([sock.fileno(), self._stop_r], [], [], POLL_S)
            if sock.fileno() in ready:
                self._take_datagram()
            if time.monotonic() >= next_try and not self._closed:
                next_try = time.monotonic() + POLL_S
                if self._socket_gone():
                    return  # bound again: wait on the new socket
                if self._try_lock():
                    log.info("wake-ups: this process listens for the host now")
                    return

    def _take_datagram(self) -> None:
        """A note from the leader, or a wake-up another process of the host handed over."""
        assert self._sock is not None
        try:
            data = self._sock.recv(meeting.MAX_NOTE, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        channel, _, note = data.decode(errors="replace").partition("\n")
        if channel in self.channels:
            self._deliver(note[1:], act=note[:1] == meeting.ACT)

    def _socket_gone(self) -> bool:
        """Bind again when the socket file (or the directory) was removed under us, as a /tmp
        cleaner may; True when it was."""
        assert self._sock_path is not None
        if self._sock_path.exists():
            return False
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._sock_path = None
        self._join()  # an OSError here ends the listener: the process exits and is restarted
        log.info("wake-ups: the socket was removed; bound again")
        return True

    def _lead_start(self) -> None:
        conn = db.connect(self.url, role=self.role)
        self._conn = conn
        conn.execute(f"set application_name = '{APP_NAME}'")
        self._listening = set()
        self._listen(self._wanted())

    def _lead(self) -> None:
        """Listen for all, forwarding as notes come; listen on any channel a newcomer wants."""
        assert self._conn is not None
        conn = self._conn
        next_look = time.monotonic() + POLL_S
        assert self._sock is not None
        sock = self._sock.fileno()
        while not self._closed:
            ready, _, _ = select.select([conn.fileno(), sock, self._stop_r], [], [], POLL_S)
            if self._stop_r in ready:
                return
            if sock in ready:  # a wake-up another process of the host handed over
                self._take_datagram()
            relisten = time.monotonic() >= next_look  # newcomers' channels, once a second
            for note in conn.notifies(timeout=0):  # what came, and any kept back by a statement
                relisten = self._forward(note.channel, note.payload) or relisten
            if relisten:
                next_look = time.monotonic() + POLL_S
                self._listen(self._wanted())

    def _members(self) -> list[str]:
        assert self.dir is not None
        return meeting.members(self.dir)

    def _wanted(self) -> list[str]:
        wanted = set(self.channels)
        for name in self._members():
            wanted.update(c for c in meeting.channels_of(name) if c.isidentifier())
        return sorted(wanted)

    def _listen(self, channels: list[str]) -> None:
        assert self._conn is not None
        for channel in channels:
            if channel not in self._listening:
                self._conn.execute(f"listen {channel}")
                self._listening.add(channel)

    def _forward(self, channel: str, payload: str) -> bool:
        """Send the note to each member subscribed to `channel`, one of them (this process
        among them) in turn marked to act on it; True when a member wants a channel not
        listened on yet."""
        assert self.dir is not None and self._sock is not None
        newcomer = False
        to: list[str] = []
        for name in self._members():
            channels = meeting.channels_of(name)
            if not channels or self.dir / name == self._sock_path:
                continue
            newcomer = newcomer or not self._listening.issuperset(channels)
            if channel in channels:
                to.append(name)
        ours = channel in self.channels
        if ours or to:
            k = self._turns[channel] % (len(to) + ours)  # who acts, in turn: ours is the last
            self._turns[channel] += 1
            acted = meeting.send_round(self._sock, self.dir, channel, payload, to, k, k < len(to))
            if ours:
                self._deliver(payload, act=not acted)  # its turn, or no other member took it
        return newcomer

    def _deliver(self, payload: str, act: bool = True) -> None:
        if not act:
            if self.looker is not None:
                self.looker(payload)
            return
        with self._cond:
            self._inbox.append(payload)
            self._cond.notify()

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing on the way out
                pass


def join(
    url: str | None, role: str, *channels: str, looker: Callable[[str], None] | None = None
) -> HostListener:
    """This process's wake-ups on `channels`, through the host's shared listener (or its own):
    `notes` yields those it acts on, `looker` gets the others (module docstring)."""
    return HostListener(url, role, list(channels), looker)
