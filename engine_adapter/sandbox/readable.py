"""Waiting for a descriptor to be readable, for any descriptor number."""

from __future__ import annotations

import math
import select
from typing import IO, Any


def readable(fd: int | IO[Any], timeout_s: float) -> bool:
    """Whether fd has something to read (or its end) within timeout_s. poll, not select: a busy
    process (bots with many steps, the console with many browsers) may hold descriptors numbered
    past select's 1024, which select cannot wait on."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, math.ceil(timeout_s * 1000))))
