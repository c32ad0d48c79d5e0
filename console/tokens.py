"""One-time sign-in links, as Jupyter prints them: `threadline up` and `threadline console link`
mint a token for the OS account running them; opening the link trades it for a session
(sessions.py).

Only a SHA-256 of each token is kept, in $THREADLINE_HOME/console-tokens.json (mode 0600), not in
the database (hashed_file.py says why).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from .hashed_file import HashedFile

TOKENS_FILE = "console-tokens.json"
TTL_S = 3600  # a link printed by `up` works for an hour; `threadline console link` makes another


def mint(home: Path, user: str, ttl_s: float = TTL_S, now: float | None = None) -> str:
    """A new one-time token for user; the caller shows it once, only its hash is kept."""
    token = secrets.token_urlsafe(32)
    now = time.time() if now is None else now
    HashedFile(home, TOKENS_FILE).add(token, now + ttl_s, now, user=user)
    return token


def consume(home: Path, token: str, now: float | None = None) -> str | None:
    """The user a token signs in, once: a used, expired or unknown token gives None."""
    now = time.time() if now is None else now
    entry = HashedFile(home, TOKENS_FILE).take(token, now)
    return None if entry is None else str(entry["user"])


def link(token: str, port: int, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{port}/?token={token}"
