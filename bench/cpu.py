"""CPU seconds spent by processes of this machine, read from /proc: a Postgres server's (all its
processes, live and exited) and given processes'. None where /proc does not tell (a server on
another machine)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import psycopg

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3, the state, first)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def process_cpu_s(pids: Iterable[int]) -> float:
    """User + system CPU of the given live processes and of their children that have exited
    (a bot's commands)."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return total / TICKS


def server_cpu_s(conn: psycopg.Connection[Any]) -> float | None:
    """All the CPU the server of `conn` has used so far: its postmaster's own and its reaped
    children's (backends that have exited), plus every live child's."""
    backend = conn.execute("select pg_backend_pid() as pid").fetchone()
    fields = _stat(int(backend["pid"] if isinstance(backend, dict) else backend[0]))
    if fields is None:
        return None
    postmaster = int(fields[1])  # the backend's parent
    own = _stat(postmaster)
    if own is None:
        return None
    total = sum(int(v) for v in own[11:15])  # utime, stime, cutime, cstime
    for stat in Path("/proc").glob("[0-9]*/stat"):
        child = _stat(int(stat.parent.name))
        if child is not None and int(child[1]) == postmaster:
            total += int(child[11]) + int(child[12])
    return total / TICKS
