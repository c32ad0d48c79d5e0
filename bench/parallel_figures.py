"""What a `parallel` group buys: N branches of `sleep 1`, each a child run, against the same N
steps one after another in one run.

    .venv/bin/python -m bench.parallel_figures [--branches 20] [--repeats 3] [--database-url URL]

One conductor and one bot process with a slot per branch (`bots --concurrency N`), so every
branch's command can run at once. A run is timed from its creation to its end on the database
clock. Prints the medians and the ratio sequential / parallel (N would be perfect); nothing here
asserts a speed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.database import add_database_option, session
from bench.stats import Summary, ratio
from bench.threadline_figures import wait_completed
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

Conn = psycopg.Connection[Any]
PARALLEL, SEQUENCE = "bench-parallel", "bench-sequence"
STEP = 'run_command: "sleep 1"'


def recipes(branches: int) -> tuple[str, str]:
    """(a parallel group of `branches` one-step branches, the same steps in sequence)."""
    group = "\n".join(
        f"      b{i}:\n        - {{id: p{i}, {STEP}}}" for i in range(1, branches + 1)
    )
    parallel = f"slug: {PARALLEL}\nsteps:\n  - id: fan\n    parallel:\n{group}\n"
    steps = "\n".join(f"  - {{id: s{i}, {STEP}}}" for i in range(1, branches + 1))
    return parallel, f"slug: {SEQUENCE}\nsteps:\n{steps}\n"


def timed_run(conn: Conn, slug: str, timeout: float) -> float:
    """Seconds from the run's creation to its end, on the database clock."""
    run_id = spawn(conn, slug).run_id
    wait_completed(conn, [run_id], timeout)
    return conn.execute(
        "select extract(epoch from finished_at - created_at)::float8 as s"
        "  from threadline.run_threads where run_id = %s",
        (run_id,),
    ).fetchone()["s"]


@dataclass(frozen=True)
class Figures:
    branches: int
    parallel: Summary
    sequential: Summary

    @property
    def speedup(self) -> str:
        return ratio(self.sequential.median, self.parallel.median)

    def lines(self) -> list[str]:
        n = self.branches
        return [
            f"{n} x `sleep 1`, parallel group ({n} child runs)  {self.parallel.fmt(1, 's', 2)}",
            f"{n} x `sleep 1`, in sequence (one run)           {self.sequential.fmt(1, 's', 2)}",
            f"sequential / parallel (p50)                     {self.speedup}  (perfect: {n})",
        ]


def measure(url: str, home: Path, branches: int, repeats: int, timeout: float) -> Figures:
    with db.connect(url) as conn:
        for text in recipes(branches):
            apply_recipe(conn, load_recipe_text(text))
        procs = harness.ProcessSet(url, home)
        try:
            procs.start("conductor", wait=True, timeout=timeout)
            procs.start("bots", args=["--concurrency", str(branches)], wait=True, timeout=timeout)
            timed_run(conn, PARALLEL, timeout)  # warm-up: every slot's first claim, caches
            parallel, sequential = [], []
            for _ in range(repeats):  # interleaved, so a noisy moment hits both sides
                parallel.append(timed_run(conn, PARALLEL, timeout))
                sequential.append(timed_run(conn, SEQUENCE, timeout))
        except Exception:
            print("benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
            raise
        finally:
            procs.kill_all()
    return Figures(branches, Summary.of(parallel), Summary.of(sequential))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, default=20, help="branches and steps (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each kind (default 3)")
    add_database_option(parser)
    args = parser.parse_args(argv)
    with session(args.database_url, "threadline-bench-parallel-") as (url, home):
        figures = measure(url, home, args.branches, args.repeats, timeout=120 + 5 * args.branches)
    print("\n".join(figures.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
