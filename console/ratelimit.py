"""Failed sign-ins, counted per key (a user name, a client address): MAX_FAILURES within WINDOW_S
lock that key for LOCKOUT_S. A locked key refuses passwords, so they cannot be guessed fast; for
sign-in links it only makes the failures slow (auth.py), so the right link is never refused."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MAX_FAILURES = 5
WINDOW_S = 60.0
LOCKOUT_S = 300.0


class FailureLimiter:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        max_failures: int = MAX_FAILURES,
        window_s: float = WINDOW_S,
        lockout_s: float = LOCKOUT_S,
    ) -> None:
        self._clock, self._max, self._window, self._lockout = (
            clock,
            max_failures,
            window_s,
            lockout_s,
        )
        self._failures: dict[str, list[float]] = {}
        self._locked_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait_s(self, *keys: str) -> float:
        """Seconds until every key may try again (0: they may now)."""
        now = self._clock()
        with self._lock:
            return max([self._locked_until.get(k, 0.0) - now for k in keys] + [0.0])

    def fail(self, *keys: str) -> None:
        now = self._clock()
        with self._lock:
            for key in keys:
                recent = [t for t in self._failures.get(key, []) if now - t < self._window] + [now]
                if len(recent) >= self._max:
                    self._locked_until[key] = now + self._lockout
                    recent = []
                self._failures[key] = recent
