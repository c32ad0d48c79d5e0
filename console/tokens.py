"""One-time sign-in links, as Jupyter prints them: `threadline up` and `threadline console link`
mint a token for the OS account running them; opening the link trades it for a session cookie.

Only a SHA-256 of each token is kept, in $THREADLINE_HOME/console-tokens.json (mode 0600), not in
the database: minting a link then needs write access to Threadline's home, which only the account
running Threadline has, whereas any database role that can reach the table could mint itself one.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TOKENS_FILE = "console-tokens.json"
TTL_S = 3600  # a link printed by `up` works for an hour; `threadline console link` makes another


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@contextmanager
def _locked(home: Path) -> Iterator[Path]:
    """The tokens file, held exclusively: the console consumes while the CLI mints."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / (TOKENS_FILE + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield home / TOKENS_FILE
    finally:
        os.close(fd)


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read sign-in tokens: {err}") from None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _write(path: Path, entries: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(entries, out)
    os.replace(tmp, path)


def mint(home: Path, user: str, ttl_s: float = TTL_S, now: float | None = None) -> str:
    """A new one-time token for user; the caller shows it once, only its hash is kept."""
    token = secrets.token_urlsafe(32)
    now = time.time() if now is None else now
    with _locked(home) as path:
        live = [e for e in _read(path) if e.get("expires", 0) > now]
        live.append({"sha256": _digest(token), "user": user, "expires": now + ttl_s})
        _write(path, live)
    return token


def consume(home: Path, token: str, now: float | None = None) -> str | None:
    """The user a token signs in, once: a used, expired or unknown token gives None."""
    now = time.time() if now is None else now
    digest = _digest(token)
    with _locked(home) as path:
        entries = _read(path)
        match = next(
            (e for e in entries if hmac.compare_digest(str(e.get("sha256", "")), digest)), None
        )
        kept = [e for e in entries if e is not match and e.get("expires", 0) > now]
        if match is not None or len(kept) != len(entries):
            _write(path, kept)
    if match is None or match.get("expires", 0) <= now:
        return None
    return str(match["user"])


def link(token: str, port: int, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{port}/?token={token}"
