"""Secrets the console checks, kept only as SHA-256 hashes with an expiry in a JSON file of
$THREADLINE_HOME (mode 0600): one-time sign-in links (tokens.py).

Not in the database: adding an entry then needs write access to Threadline's home, which only
the account running Threadline has, whereas any database login that could reach a table could add
itself one (a link is as good as a password). Sessions are in the database (sessions.py says
why), written by no login but through migration 045's functions.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine_adapter.model.errors import Invalid

Entry = dict[str, Any]


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class HashedFile:
    """A list of entries {"sha256": ..., "expires": epoch seconds, ...}, one file, locked for
    every change (the console consumes links while the CLI mints them)."""

    def __init__(self, home: Path, name: str) -> None:
        self.home, self.path = home, home / name

    @contextmanager
    def _locked(self) -> Iterator[list[Entry]]:
        """The entries, held exclusively; what the caller leaves in the list is written back."""
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            entries = self._read()
            before = list(entries)
            yield entries
            if entries != before:
                self._write(entries)
        finally:
            os.close(fd)

    def _read(self) -> list[Entry]:
        try:
            entries = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, json.JSONDecodeError) as err:
            raise Invalid(f"{self.path}: cannot be read: {err}") from None
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    def _write(self, entries: list[Entry]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(entries, out)
        os.replace(tmp, self.path)  # a reader sees the old list or the new one, never half

    @staticmethod
    def _match(entries: list[Entry], secret: str) -> Entry | None:
        wanted = digest(secret)
        return next(
            (e for e in entries if hmac.compare_digest(str(e.get("sha256", "")), wanted)), None
        )

    def add(self, secret: str, expires: float, now: float, **fields: Any) -> None:
        """Keep secret's hash with fields until expires; expired entries are dropped."""
        with self._locked() as entries:
            entries[:] = [e for e in entries if e.get("expires", 0) > now]
            entries.append({"sha256": digest(secret), **fields, "expires": expires})

    def find(self, secret: str, now: float) -> Entry | None:
        """The live entry of secret, or None; reads without the lock (writes are atomic)."""
        entry = self._match(self._read(), secret)
        return entry if entry is not None and entry.get("expires", 0) > now else None

    def take(self, secret: str, now: float) -> Entry | None:
        """Remove secret's entry (and every expired one); the entry if it was live."""
        with self._locked() as entries:
            entry = self._match(entries, secret)
            entries[:] = [e for e in entries if e is not entry and e.get("expires", 0) > now]
        return entry if entry is not None and entry.get("expires", 0) > now else None
