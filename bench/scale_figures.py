"""Step -> next step latency with many runs in flight, by conductor executor threads.

    .venv/bin/python -m bench.scale_figures [--in-flight 1 10 50] [--threads 1 4] [--repeats 3]

N runs of five `true` steps are spawned at once against one conductor and one bots process (a slot
per run, up to 16); a step's latency to the next is from its terminal signal to the next step's
instruction, on the database clock, so bot time and the benchmark's polling never enter it. Each
thread count gets a conductor of its own on the same database; the sizes are interleaved so a noisy
moment hits every column. Prints medians, p90s and the ratio 1 thread / N threads; nothing here
asserts a speed.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.database import add_database_option, session
from bench.stats import Summary, ratio
from bench.threadline_figures import step_latencies, wait_completed
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.conductor.conductor import THREADS_ENV
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

Conn = psycopg.Connection[Any]
SLUG = "bench-scale"
STEPS = 5
STATS_FLUSH_S = 1.5
RECIPE = f"slug: {SLUG}\nsteps:\n" + "".join(
    f'  - {{id: s{i}, run_command: "true"}}\n' for i in range(1, STEPS + 1)
)


def db_counters(conn: Conn) -> tuple[int, int]:
    """(commits in this database, WAL records of the server) so far."""
    row = conn.execute(
        "select (select xact_commit from pg_stat_database where datname = current_database())"
        " as commits, (select wal_records from pg_stat_wal) as wal"
    ).fetchone()
    return int(row["commits"]), int(row["wal"])


def batch(conn: Conn, in_flight: int, timeout: float) -> tuple[list[float], tuple[int, int]]:
    """Spawn `in_flight` runs at once: their step -> next step latencies in seconds, and the
    commits and WAL records the whole batch cost (every process's, spawns included)."""
    before = db_counters(conn)
    run_ids = [spawn(conn, SLUG).run_id for _ in range(in_flight)]
    wait_completed(conn, run_ids, timeout)
    time.sleep(STATS_FLUSH_S)  # busy backends report their counts about once a second
    conn.execute("select pg_stat_clear_snapshot()")
    after = db_counters(conn)
    cost = (after[0] - before[0], after[1] - before[1])
    return step_latencies(conn, run_ids)[0], cost


@dataclass(frozen=True)
class Figures:
    by_size: dict[tuple[int, int], Summary]  # (threads, in flight) -> step -> next step
    per_workflow: tuple[float, float]  # commits, WAL records per run of five steps

    def lines(self) -> list[str]:
        threads = sorted({t for t, _ in self.by_size})
        sizes = sorted({n for _, n in self.by_size})
        out = []
        for n in sizes:
            for t in threads:
                label = f"step -> next step, {n:>3} in flight, {t} executor thread(s)"
                out.append(f"{label:<56} {self.by_size[t, n].fmt(1000)}")
            if len(threads) > 1:
                one, most = self.by_size[threads[0], n], self.by_size[threads[-1], n]
                out.append(
                    f"{'':<4}p50 {threads[0]} thread / {threads[-1]} threads: "
                    f"{ratio(one.median, most.median)}"
                )
        commits, wal = self.per_workflow
        out.append(
            f"per run of {STEPS} steps (all processes): {commits:.0f} commits, "
            f"{wal:.0f} WAL records"
        )
        return out


def measure(
    url: str, home: Path, sizes: list[int], threads: list[int], repeats: int, timeout: float
) -> Figures:
    samples: dict[tuple[int, int], list[float]] = {}
    runs, commits, wal = 0, 0, 0
    with db.connect(url) as conn:
        apply_recipe(conn, load_recipe_text(RECIPE))
        for count in threads:
            procs = harness.ProcessSet(url, home / f"threads-{count}")
            try:
                procs.start("conductor", env={THREADS_ENV: str(count)}, wait=True)
                slots = str(min(max(sizes), 16))
                procs.start("bots", args=["--concurrency", slots], wait=True)
                batch(conn, 2, timeout)  # warm-up: connections, caches
                for _ in range(repeats):
                    for n in sizes:
                        latencies, (c, w) = batch(conn, n, timeout)
                        samples.setdefault((count, n), []).extend(latencies)
                        runs, commits, wal = runs + n, commits + c, wal + w
            except Exception:
                print("benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
                raise
            finally:
                procs.kill_all()
    return Figures(
        {key: Summary.of(values) for key, values in samples.items()},
        (commits / runs, wal / runs),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3, help="batches of each size (default 3)")
    add_database_option(parser)
    args = parser.parse_args(argv)
    with session(args.database_url, "threadline-bench-scale-") as (url, home):
        figures = measure(url, home, args.in_flight, args.threads, args.repeats, timeout=300)
    print("\n".join(figures.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
