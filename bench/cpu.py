"""CPU seconds spent by processes of this machine, read from /proc: a Postgres server's (all its
processes, live and exited) and given processes'. None where /proc does not tell (a server on
another machine)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg

from engine_adapter.sandbox.step_guard import process_tree

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3, the state, first)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _own_ticks(fields: list[str]) -> int:
    return int(fields[11]) + int(fields[12])  # utime, stime


def process_cpu_s(pids: Iterable[int]) -> float:
    """User + system CPU of the given live processes and of all their descendants: each live
    one's own and that of its children that have exited (a bot's commands; a sandbox kept for a
    run's commands holds theirs until it ends)."""
    ticks = 0
    for root in pids:
        for _pid, fields in process_tree(root):
            ticks += _own_ticks(fields) + int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / TICKS


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
            total += _own_ticks(child)
    return total / TICKS


def own_and_children_s(pid: int) -> tuple[float, float]:
    """A live process's own CPU (user + system) and that of its children that have exited (a
    bot's commands, with everything a command's sandbox started)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0, 0.0
    children = int(fields[13]) + int(fields[14])  # cutime, cstime
    return _own_ticks(fields) / TICKS, children / TICKS


def backends_cpu_s(conn: psycopg.Connection[Any]) -> dict[int, tuple[str, float]]:
    """The server's live backends of this database: pid -> (the client's application_name,
    CPU seconds so far). Empty where /proc does not tell (a server on another machine)."""
    rows = conn.execute(
        "select pid, coalesce(application_name, '') as app from pg_stat_activity"
        " where datname = current_database()"
    ).fetchall()
    out = {}
    for row in rows:
        fields = _stat(int(row["pid"]))
        if fields is not None:
            out[int(row["pid"])] = (str(row["app"]), _own_ticks(fields) / TICKS)
    return out


def backends_delta_by_app(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds the backends alive at both readings spent between them, by application."""
    out: dict[str, float] = {}
    for pid, (app, cpu) in after.items():
        if pid in before:
            out[app] = out.get(app, 0.0) + cpu - before[pid][1]
    return out


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (user, nice, system, irq, softirq): what
    namespaces and mounts cost is partly spent outside the processes that asked for them."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7)) / TICKS
