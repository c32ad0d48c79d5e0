"""Spawn (enqueue) alone: one connection spawning runs one after another, nothing else running.

    .venv/bin/python -m bench.spawn_figures [--spawns 1000] [--rounds 3] [--database-url URL]

In turns on one database, each round: Absurd's client spawning tasks (`Absurd.spawn`), then
Threadline's own spawn (`runs.spawn.spawn`, the door the CLI, console, API and schedules use) of
the fair baseline's three-step workflow, twice: with no process of this host taking wake-ups (each
spawn's wake-up is a NOTIFY in a transaction of its own after the spawn's), and with a conductor's
listener on the host, as where Threadline runs (the wake-up handed to it, store/meeting.py): in a
process of its own, as a conductor's is (a listener thread in the spawner's own process would take
the spawner's interpreter lock at each wake-up it reads). And a third time with the spawner's
wake-ups dropped, which no real caller does: what the spawn's own statement costs, so the
wake-up's share of a spawn shows (Absurd's workers poll and wake no one).
Prints spawns a second, medians and ratios to Absurd's. `bench.fair_figures` measures spawns
during a turn, with every process of the system at work beside the spawner; this measures the
spawn itself. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from absurd_sdk import Absurd
from psycopg.rows import dict_row

from bench.database import add_database_option, session
from bench.fair_figures import QUEUE, SLUG, add_engine_option, prepare
from bench.stats import ratio
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db, host_listener
from engine_adapter.store.waking import WakingConnection

DROPPED = "threadline, its wake-up dropped"
SYSTEMS = ("absurd", "threadline", "threadline, conductor on the host", DROPPED)


class UnwakingConnection(WakingConnection):
    """A spawner whose wake-ups go nowhere (the database still hands them over as notices)."""

    def send_wakes(self) -> None:
        self._wakes.clear()


def rate(n: int, spawn_one: Callable[[], object]) -> float:
    spawn_one()  # warm: the connection's first statements are prepared
    started = time.perf_counter()
    for _ in range(n):
        spawn_one()
    return n / (time.perf_counter() - started)


@contextmanager
def listener_process(url: str) -> Iterator[None]:
    """A process of this host taking the conductors' wake-ups (as a conductor's listener does),
    until the block ends."""
    command = [sys.executable, "-m", "bench.spawn_figures", "--listen", url]
    root = Path(__file__).resolve().parents[1]  # where `bench` imports from
    proc = subprocess.Popen(
        command, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "listening":
            raise RuntimeError("the listener process did not start")
        yield
    finally:
        proc.kill()
        proc.wait()


def listen(url: str) -> None:
    """--listen: join the host's listener for the conductors' channel until stdin closes."""
    with host_listener.join(url, "conductor", db.NOTIFY_CHANNEL):
        print("listening", flush=True)
        sys.stdin.read()


def measure(
    url: str, n: int, rounds: int, progress: Callable[[str], None], engine: str = "plain"
) -> dict[str, list[float]]:
    prepare(url, engine)
    rates: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    client = Absurd(url, queue_name=QUEUE)
    try:
        for i in range(rounds):
            rates["absurd"].append(rate(n, lambda: client.spawn("bare", {}, queue=QUEUE)))
            with db.connect(url) as conn:
                rates["threadline"].append(rate(n, lambda: spawn(conn, SLUG)))
            with listener_process(url):
                with db.connect(url) as conn:
                    rates[SYSTEMS[2]].append(rate(n, lambda: spawn(conn, SLUG)))
            with UnwakingConnection.open(url, True, row_factory=dict_row) as conn:
                rates[SYSTEMS[3]].append(rate(n, lambda: spawn(conn, SLUG)))
            progress(f"round {i + 1}: " + ", ".join(f"{s} {r[-1]:.0f}/s" for s, r in rates.items()))
    finally:
        client.close()
    return rates


def medians(rates: dict[str, list[float]]) -> list[tuple[str, float, float]]:
    """(system, median spawns a second, Absurd's median) for each system."""
    absurd = statistics.median(rates["absurd"])
    return [(system, statistics.median(values), absurd) for system, values in rates.items()]


def report(rates: dict[str, list[float]], n: int) -> list[str]:
    rounds = len(rates["absurd"])
    out = [f"spawn alone: {n} spawns per round on one connection, medians of {rounds}"]
    for system, median, absurd in medians(rates):
        out.append(
            f"  {system:<36} {median:7.0f}/s  {ratio(median, absurd)}x Absurd's"
            + (" (no real caller drops it)" if system == DROPPED else " (target >= 0.5x)")
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spawns", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    add_engine_option(parser)
    add_database_option(parser)
    parser.add_argument("--listen", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.listen:
        listen(args.listen)
        return 0
    with session(args.database_url, "spawn") as (url, _home):
        rates = measure(
            url, args.spawns, args.rounds, lambda line: print("  ..", line, flush=True), args.engine
        )
    print("\n".join(report(rates, args.spawns)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
