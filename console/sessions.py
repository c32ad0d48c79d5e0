"""Console sessions, kept on the server: a session cookie carries only a random session id
(signed), and the session is its entry in $THREADLINE_HOME/console-sessions.json (mode 0600, only
the id's SHA-256 kept; hashed_file.py says why not the database). Signing out removes the entry,
so the old cookie loads no page and opens no live connection again; entries survive a restart of
the console and expire after SESSION_DAYS.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from .hashed_file import HashedFile

SESSIONS_FILE = "console-sessions.json"
SESSION_DAYS = 7


@dataclass(frozen=True)
class Record:
    user: str
    via: str  # "token" (a sign-in link) or "password" (the users file)


def _file(home: Path) -> HashedFile:
    return HashedFile(home, SESSIONS_FILE)


def open_session(home: Path, user: str, via: str, now: float | None = None) -> str:
    """A new session for user; returns its id (the caller puts it, signed, in the cookie)."""
    sid = secrets.token_urlsafe(32)
    now = time.time() if now is None else now
    _file(home).add(sid, now + SESSION_DAYS * 86400, now, user=user, via=via, created=now)
    return sid


def find(home: Path, sid: str, now: float | None = None) -> Record | None:
    """The live session sid names, or None (signed out, expired, never opened)."""
    entry = _file(home).find(sid, time.time() if now is None else now)
    return None if entry is None else Record(str(entry.get("user")), str(entry.get("via")))


def close(home: Path, sid: str, now: float | None = None) -> Record | None:
    """End the session sid names; returns it if it was live."""
    entry = _file(home).take(sid, time.time() if now is None else now)
    return None if entry is None else Record(str(entry.get("user")), str(entry.get("via")))
