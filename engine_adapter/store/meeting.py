"""Where a host's processes meet, and how a wake-up reaches them there without the database.

The processes of one host, OS user and database share a directory (mode 0700: a step's command,
run as another user or in a sandbox, never reaches it). Each process that waits for wake-ups binds
a datagram socket there, named by the channels it takes: the host's listener (host_listener.py)
forwards each notification to them, and a process that makes a wake-up hands it to them itself
(`hand_over`), which spares the database two commits: the NOTIFY's and the read of it in the
listening backend (docs/speed.md). A wake-up is a hint: a lost one costs time (every waiting
process also looks for work each second), never a run.

`THREADLINE_HOST_LISTENER=off` (or a directory that is not safely ours) turns both off: each
process listens on a connection of its own, and every wake-up is a NOTIFY.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from engine_adapter.model.errors import Invalid

ENV = "THREADLINE_HOST_LISTENER"
SOCK_SUFFIX = ".sock"
MAX_NOTE = 16384  # a NOTIFY payload is under 8000 bytes
ACT, LOOK = "!", "?"  # a datagram's mark after its channel: its taker acts on it, or looks

_turns = itertools.count()  # which member acts on the next wake-up handed over from here
# A wake-up is handed over at every spawn, SEND and report: the directory found safely ours is
# trusted for a second before it is checked again (only its owner can change it: it is 0700 and
# ours, in a sticky or private directory), and one unbound socket sends them all (a datagram's
# address is its own, so threads may share it).
TRUST_DIR_S = 1.0
_trusted: dict[str, tuple[float, Path]] = {}
_sender: socket.socket | None = None
_sender_lock = threading.Lock()


def enabled() -> bool:
    raw = os.environ.get(ENV, "").strip().lower()
    if raw not in ("", "on", "off"):
        raise Invalid(f"{ENV}={raw!r} must be on or off")
    return raw != "off"


def database_key(url: str) -> str:
    """A short name for the database `url` reaches (host, port, dbname; not the user)."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    parts = [
        str(info.get("host") or os.environ.get("PGHOST", "")),
        str(info.get("port") or os.environ.get("PGPORT", "5432")),
        str(info.get("dbname") or os.environ.get("PGDATABASE", "")),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _base_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK | os.X_OK):
        return Path(runtime)
    return Path(tempfile.gettempdir())


def _dir_of(database: str) -> tuple[Path, Path]:
    """(the OS user's directory, the meeting directory of `database`, a database_key)."""
    top = _base_dir() / f"threadline-wakes-{os.geteuid()}"
    return top, top / database


def _check_ours(path: Path) -> None:
    """Raise PermissionError unless `path` is a directory of ours that no one else may write."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{path} is not a directory")
    if st.st_uid != os.geteuid():
        raise PermissionError(f"{path} belongs to uid {st.st_uid}")
    if st.st_mode & 0o022:
        raise PermissionError(f"{path} may be written by others (mode {st.st_mode & 0o777:o})")


def _own_dir(path: Path) -> None:
    """Create `path` (0700) or check that an existing one is ours and no one else may write it."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    _check_ours(path)


def meeting_dir(url: str) -> Path:
    """The directory this host's processes of this OS user and database meet in (created)."""
    top, here = _dir_of(database_key(url))
    _own_dir(top)
    _own_dir(here)
    return here


def _existing_dir(database: str) -> Path | None:
    """The meeting directory when some process made it and it is safely ours; else None."""
    top, here = _dir_of(database)
    try:
        _check_ours(top)
        _check_ours(here)
    except OSError:
        return None
    return here


def _trusted_dir(database: str) -> Path | None:
    """_existing_dir, checked at most once a second."""
    now = time.monotonic()
    known = _trusted.get(database)
    if known is not None and now - known[0] < TRUST_DIR_S:
        return known[1]
    here = _existing_dir(database)
    if here is None:
        _trusted.pop(database, None)
    else:
        _trusted[database] = (now, here)
    return here


def _sending_socket() -> socket.socket:
    global _sender
    with _sender_lock:
        if _sender is None:
            _sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        return _sender


def _after_fork() -> None:
    """A forked child makes its own (the parent's lock may have been held at the fork)."""
    global _sender, _sender_lock
    _sender, _sender_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def forget(url: str) -> None:
    """Remove the meeting directory of a database dropped for good (a test's, a benchmark's),
    once none of its processes is left."""
    _trusted.pop(database_key(url), None)
    shutil.rmtree(_dir_of(database_key(url))[1], True)


def channels_of(name: str) -> list[str]:
    """The channels a member socket subscribes to, by name: `<ch>[+<ch>].<pid>.<rand>.sock`."""
    if not name.endswith(SOCK_SUFFIX):
        return []
    return name.split(".", 1)[0].split("+")


def members(here: Path) -> list[str]:
    try:
        return os.listdir(here)
    except FileNotFoundError:  # removed under us (a /tmp cleaner): nobody to reach
        return []


def send_note(sock: socket.socket, here: Path, name: str, note: str) -> bool:
    """A datagram to member `name`; False when it could not take it."""
    try:
        sock.sendto(note.encode(), socket.MSG_DONTWAIT, str(here / name))
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        try:  # its process is gone
            (here / name).unlink()
        except FileNotFoundError:
            pass
    except (BlockingIOError, InterruptedError):
        pass  # its reader is behind: this wake-up is dropped, its timer finds the work
    except OSError as err:
        if err.errno != errno.ENOBUFS:
            raise
    return False


def send_round(
    sock: socket.socket,
    here: Path,
    channel: str,
    payload: str,
    to: list[str],
    first: int,
    act: bool = True,
) -> bool:
    """The note to every member in `to`, the one at `first` (or the next that takes it) marked
    to act on it, the others to look (all of them, when not `act`); True when one took it to
    act."""
    acted = not act
    k = first % len(to) if to else 0
    for name in to[k:] + to[:k]:
        note = f"{channel}\n{LOOK if acted else ACT}{payload}"
        acted = send_note(sock, here, name, note) or acted
    return acted and act


def hand_over(database: str, channel: str, payload: str) -> bool:
    """Hand a wake-up to this host's processes of `database` (its database_key) that take
    `channel`, without the database: one acts on it, the others look (as the host's listener
    forwards a notification). False when none here took it, or anything about the directory or
    the setting is amiss: the caller then notifies through the database (it has committed
    already; a wake-up never fails it)."""
    try:
        if not enabled():
            return False
        here = _trusted_dir(database)
        if here is None:
            return False
        to = sorted(name for name in members(here) if channel in channels_of(name))
        if not to:
            return False
        return send_round(_sending_socket(), here, channel, payload, to, next(_turns))
    except (OSError, Invalid):
        return False
