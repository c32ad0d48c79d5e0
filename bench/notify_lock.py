"""How much NOTIFY's commit lock costs as the WAL flush gets slower.

    .venv/bin/python -m bench.notify_lock [--in-flight 10] [--flush-ms 0 5] [--repeats 3]

A transaction that NOTIFYs takes one lock for the whole server before its commit and keeps it
until its commit record is flushed (Postgres' async.c: so notifications are queued in commit
order). Notifying commits therefore flush one at a time, never as a group: at a flush of F ms the
server commits at most 1000/F of them a second, however many machines send them. Every step
crossed several (the SEND wakes the bots, the report emits the done event, and the console's change
feed announces each change to a run, a claim or a workflow). Since migration 030 none does: the
wake-ups go out after the commit, in transactions that wait for no flush.

On a private embedded server, `commit_delay` stands in for a slower disk (a flush waits that
long, and a group of commits shares it). For each flush time, batches of runs of five `true`
steps go through one conductor and one bots process: with the change feed's triggers as shipped
and a console following the feed, and with the triggers switched off (in this throwaway database
only). A sampler reads `pg_stat_activity` every 5 ms to say which share of the busy backends'
time went waiting for the notify lock. Prints steps per second and that share; nothing here
asserts a speed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.database import fresh_database
from bench.scale_figures import RECIPE, SLUG
from bench.threadline_figures import wait_completed
from console import live
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

Conn = psycopg.Connection[Any]
STEPS = 5
FEED_TABLES = ("run_threads", "step_claims", "decisions", "workers", "workflows")
SAMPLE_S = 0.005


@dataclass(frozen=True)
class Figure:
    flush_ms: float
    feed: bool
    steps_per_s: float
    notify_lock_share: float  # of sampled busy-backend time, waiting for the notify lock


class WaitSampler:
    """Counts busy backends of one database by what they wait for, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.waits: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                for (what,) in conn.execute(
                    "select coalesce(wait_event_type || ':' || wait_event, 'CPU')"
                    "  from pg_stat_activity where state = 'active'"
                    "   and datname = current_database() and pid <> pg_backend_pid()"
                ):
                    self.waits[what] += 1
                time.sleep(SAMPLE_S)

    def share(self, what: str) -> float:
        total = sum(self.waits.values())
        return self.waits[what] / total if total else 0.0


def set_flush_delay(admin_url: str, flush_ms: float) -> None:
    """commit_delay: a flush waits this long first (commit_siblings 0: always)."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"alter system set commit_delay = {int(flush_ms * 1000)}")
        admin.execute("alter system set commit_siblings = 0")
        admin.execute("select pg_reload_conf()")


def set_feed(conn: Conn, on: bool) -> None:
    verb = "enable" if on else "disable"
    for table in FEED_TABLES:
        conn.execute(f"alter table threadline.{table} {verb} trigger {table}_announce")


@contextmanager
def following(url: str, feed: bool) -> Iterator[None]:
    """With the feed on, a console follows it (the database says it only then)."""
    if not feed:
        yield
        return
    with psycopg.connect(url, autocommit=True) as console:
        console.execute("select threadline.follow_feed()")
        console.execute(f"listen {live.CHANNEL}")
        yield


def batches(url: str, conn: Conn, in_flight: int, repeats: int) -> tuple[float, float]:
    """(steps per second, the notify lock's share of busy time) over `repeats` batches."""
    with WaitSampler(url) as sampler:
        started = time.monotonic()
        for _ in range(repeats):
            wait_completed(conn, [spawn(conn, SLUG).run_id for _ in range(in_flight)], 300)
        elapsed = time.monotonic() - started
    return in_flight * repeats * STEPS / elapsed, sampler.share("Lock:object")


def measure(in_flight: int, flush_ms: list[float], repeats: int) -> list[Figure]:
    figures = []
    with tempfile.TemporaryDirectory(prefix="threadline-bench-notify-") as tmp:
        with harness.throwaway_server(home=Path(tmp) / "pg") as admin_url:
            with fresh_database(admin_url) as url, db.connect(url) as conn:
                apply_recipe(conn, load_recipe_text(RECIPE))
                procs = harness.ProcessSet(url, Path(tmp) / "procs")
                try:
                    procs.start("conductor", wait=True)
                    procs.start("bots", args=["--concurrency", "16"], wait=True)
                    wait_completed(conn, [spawn(conn, SLUG).run_id for _ in range(2)], 60)
                    for delay in flush_ms:
                        set_flush_delay(admin_url, delay)
                        for feed in (True, False):
                            set_feed(conn, feed)
                            with following(url, feed):
                                rate, share = batches(url, conn, in_flight, repeats)
                            figures.append(Figure(delay, feed, rate, share))
                except Exception:
                    print("benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
                    raise
                finally:
                    procs.kill_all()
    return figures


def lines(figures: list[Figure], in_flight: int) -> list[str]:
    out = [f"{in_flight} runs of {STEPS} `true` steps in flight:"]
    for f in figures:
        feed = "change feed on " if f.feed else "change feed off"
        out.append(
            f"  flush +{f.flush_ms:g} ms, {feed}: {f.steps_per_s:6.1f} steps/s,"
            f" {f.notify_lock_share * 100:4.0f}% of busy backend time waiting for the notify lock"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=10)
    parser.add_argument("--flush-ms", type=float, nargs="+", default=[0, 5])
    parser.add_argument("--repeats", type=int, default=3, help="batches per figure (default 3)")
    args = parser.parse_args(argv)
    print("\n".join(lines(measure(args.in_flight, args.flush_ms, args.repeats), args.in_flight)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
