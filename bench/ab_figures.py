"""Two settings side by side: throughput and CPU per step with many runs in flight, interleaved.

    .venv/bin/python -m bench.ab_figures --b THREADLINE_SANDBOX=none
    .venv/bin/python -m bench.ab_figures --a THREADLINE_CONDUCTOR_THREADS=4 \\
        --b THREADLINE_CONDUCTOR_THREADS=16 [--in-flight 50] [--repeats 4]

Each setting is a fresh conductor and bots process (16 slots) on the same database, given the
setting's environment. They take turns, A then B, `--repeats` times, so a noisy moment of a
shared machine hits both; each turn spawns `--in-flight` runs of five `true` steps at once,
`--rounds` times. Prints the medians per setting and B's ratio to A: steps per second, and CPU
per step of the whole machine, of Postgres (all of it: background work included), of the
conductor and the bots processes, and of the bots' commands with their sandboxes. Nothing here
asserts a speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench import cpu
from bench.database import add_database_option, session
from bench.scale_figures import RECIPE, SLUG, STEPS
from bench.stats import ratio
from bench.threadline_figures import wait_completed
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

Conn = psycopg.Connection[Any]
SLOTS = "16"
FIGURES = ("steps/s", "machine", "postgres", "conductor", "bots", "commands")


@dataclass(frozen=True)
class Turn:
    """One turn of a setting: steps per second and CPU ms per step (FIGURES, in order)."""

    values: tuple[float, ...]


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"expected NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


def turn(conn: Conn, url: str, home: Path, env: dict[str, str], runs: int, rounds: int) -> Turn:
    procs = harness.ProcessSet(url, home)
    try:
        conductor = procs.start("conductor", env=env, wait=True)
        bots = procs.start("bots", env=env, args=["--concurrency", SLOTS], wait=True)
        wait_completed(conn, [spawn(conn, SLUG).run_id for _ in range(2)], 120)  # warm-up
        before = (
            cpu.machine_busy_s(),
            cpu.server_cpu_s(conn),
            cpu.own_and_children_s(conductor.pid),
            cpu.own_and_children_s(bots.pid),
        )
        started = time.monotonic()
        for _ in range(rounds):
            wait_completed(conn, [spawn(conn, SLUG).run_id for _ in range(runs)], 600)
        elapsed = time.monotonic() - started
        after = (
            cpu.machine_busy_s(),
            cpu.server_cpu_s(conn),
            cpu.own_and_children_s(conductor.pid),
            cpu.own_and_children_s(bots.pid),
        )
    except Exception:
        print("benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
        raise
    finally:
        procs.kill_all()
    steps = runs * rounds * STEPS
    server = (after[1] - before[1]) if after[1] is not None and before[1] is not None else 0.0
    per_step_ms = [
        (after[0] - before[0]),
        server,
        after[2][0] - before[2][0],
        after[3][0] - before[3][0],
        after[3][1] - before[3][1],
    ]
    return Turn((steps / elapsed, *(v * 1000 / steps for v in per_step_ms)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", nargs="*", default=[], metavar="NAME=VALUE", help="setting A")
    parser.add_argument("--b", nargs="*", default=[], metavar="NAME=VALUE", help="setting B")
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="batches per turn (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="turns of each (default 3)")
    add_database_option(parser)
    args = parser.parse_args(argv)
    settings = {"A": parse_env(args.a), "B": parse_env(args.b)}
    turns: dict[str, list[Turn]] = {"A": [], "B": []}
    with session(args.database_url, "threadline-bench-ab-") as (url, home):
        with db.connect(url) as conn:
            apply_recipe(conn, load_recipe_text(RECIPE))
            for i in range(args.repeats):
                for name, env in settings.items():
                    t = turn(conn, url, home / f"{name}{i}", env, args.in_flight, args.rounds)
                    turns[name].append(t)
                    print(f"  .. {name} turn {i + 1}: {t.values[0]:.1f} steps/s", flush=True)
    print(f"{args.in_flight} runs of {STEPS} `true` steps in flight, medians of {args.repeats}:")
    for name, env in settings.items():
        label = " ".join(f"{k}={v}" for k, v in env.items()) or "(defaults)"
        print(f"  {name}: {label}")
    print(f"  {'':<22}{'A':>10}{'B':>10}   B / A")
    medians = {
        name: [statistics.median(t.values[i] for t in ts) for i in range(len(FIGURES))]
        for name, ts in turns.items()
    }
    for i, figure in enumerate(FIGURES):
        label = figure if i == 0 else f"{figure} CPU ms/step"
        a, b = medians["A"][i], medians["B"][i]
        print(f"  {label:<22}{a:>10.1f}{b:>10.1f}   {ratio(b, a)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
