"""The scaling table: the fair baseline (bench/fair_figures.py) at 1, 2, 4, 8 processes.

    .venv/bin/python -m bench.scale16 [--processes 1 2 4 8] [--runs 800] [--repeats 2]
        [--concurrency 4] [--sandbox auto|none] [--database-url URL]

At each process count N the three systems take their turns on one database: N Absurd workers
(each `--concurrency` threads) with in-process steps and with each step a subprocess, and N
conductor + N bots process pairs. The turns are interleaved (every count and system within each
repeat, the counts in reverse order on every other repeat), so a noisy moment, and the tables
growing, hit them all. Printed after each repeat (a run cut short still leaves a table): per
process count the throughput of each system with its ratio to the fewest processes, and
Threadline's ratio to the subprocess baseline; the per-workflow costs at each count; and the
issue's targets (8 pairs >= 5.0x one pair, >= 0.7x the subprocess baseline at 8). Made for a
16-core machine (bench/device/scale16.sh); on fewer cores the larger counts only queue. Nothing
here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from bench import fair_figures as fair
from bench.database import session
from bench.stats import ratio
from engine_adapter.testing import harness

Turns = dict[int, dict[str, list[fair.Turn]]]  # process count -> system -> its turns
Rates = dict[int, dict[str, float]]  # process count -> system -> median workflows/s

COLUMNS = ("bare", "subprocess", "threadline")  # the order: the ceiling first
HEADS = {
    "bare": "bare Absurd wf/s",
    "subprocess": "Absurd, each step a subprocess",
    "threadline": "Threadline",
}
TARGET_PROCESSES = 8
TARGET_SCALING = 5.0  # 8 pairs >= 5.0x one pair
TARGET_TO_BASELINE = 0.7  # >= 0.7x the subprocess baseline's throughput at 8


def order(counts: list[int], repeat: int) -> list[int]:
    """The process counts of one repeat: reversed on every other one, so no count always runs
    on the smallest (or largest) tables."""
    return counts if repeat % 2 == 0 else counts[::-1]


def rates(turns: Turns) -> Rates:
    """Median throughput of each system at each process count that has turns."""
    out: Rates = {}
    for count, by_system in turns.items():
        if all(by_system[s] for s in COLUMNS):
            out[count] = {s: fair.medians(by_system[s], "wf_per_s") or 0.0 for s in COLUMNS}
    return out


def markdown(rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(r) + " |" for r in rows[:1]] + [
        "|" + "---|" * len(rows[0]),
        *("| " + " | ".join(r) + " |" for r in rows[1:]),
    ]


def scaling_table(wf: Rates) -> list[str]:
    """Workflows/s per process count, each with its ratio to the fewest processes, and
    Threadline's ratio to the subprocess baseline at the same count (a Markdown table)."""
    counts = sorted(wf)
    if not counts:
        return ["(no process count has a turn of every system yet)"]
    base = wf[counts[0]]
    rows = [
        [
            f"processes (ratio to {counts[0]})",
            *(HEADS[s] for s in COLUMNS),
            "Threadline / subprocess",
        ]
    ]
    for count in counts:
        cells = [
            f"{wf[count][s]:.1f}"
            + ("" if count == counts[0] else f" ({ratio(wf[count][s], base[s])}x)")
            for s in COLUMNS
        ]
        to_baseline = ratio(wf[count]["threadline"], wf[count]["subprocess"])
        rows.append([str(count), *cells, f"{to_baseline}x"])
    return markdown(rows)


def targets(wf: Rates) -> list[str]:
    """The issue's two scaling targets, with what was measured against each."""
    top = TARGET_PROCESSES
    if 1 not in wf or top not in wf:
        return [f"targets: not measured (they need turns at 1 and {top} processes)"]
    one, eight = wf[1], wf[top]
    scaling = eight["threadline"] / one["threadline"] if one["threadline"] else 0.0
    to_baseline = eight["threadline"] / eight["subprocess"] if eight["subprocess"] else 0.0
    return [
        f"target: {top} pairs >= {TARGET_SCALING:.1f}x one pair: Threadline {scaling:.2f}x"
        f" (bare Absurd {ratio(eight['bare'], one['bare'])}x, subprocess"
        f" {ratio(eight['subprocess'], one['subprocess'])}x)"
        f" - {'met' if scaling >= TARGET_SCALING else 'not met'}",
        f"target: >= {TARGET_TO_BASELINE:.1f}x the subprocess baseline at {top}: Threadline"
        f" {to_baseline:.2f}x - {'met' if to_baseline >= TARGET_TO_BASELINE else 'not met'}",
    ]


COSTS = (  # (Turn field, head, format): per workflow, Threadline (subprocess baseline)
    ("pg_cpu_ms", "Postgres CPU ms", "{:.1f}"),
    ("commits", "commits", "{:.1f}"),
    ("wal_records", "WAL records", "{:.0f}"),
    ("worker_cpu_ms", "worker CPU ms", "{:.1f}"),
    ("spawn_per_s", "spawns/s, one connection", "{:.0f}"),
)


def costs_table(turns: Turns) -> list[str]:
    """Per workflow at each process count: Threadline's medians, the subprocess baseline's in
    brackets (Postgres CPU and commits grow with processes where listeners do)."""

    def cell(count: int, field: str, fmt: str) -> str:
        ours = fair.medians(turns[count]["threadline"], field)
        base = fair.medians(turns[count]["subprocess"], field)
        said = [("-" if v is None else fmt.format(v)) for v in (ours, base)]
        return f"{said[0]} ({said[1]})"

    counts = sorted(c for c in turns if turns[c]["threadline"] and turns[c]["subprocess"])
    rows = [["processes", *(head for _, head, _ in COSTS)]]
    rows += [[str(c), *(cell(c, field, fmt) for field, _, fmt in COSTS)] for c in counts]
    return markdown(rows) if counts else []


def tables(turns: Turns) -> list[str]:
    wf = rates(turns)
    return [
        "throughput, workflows/s (medians):",
        *scaling_table(wf),
        "",
        "per workflow: Threadline (Absurd, each step a subprocess):",
        *costs_table(turns),
        "",
        *targets(wf),
    ]


def measure(
    url: str,
    home: Path,
    n: int,
    repeats: int,
    concurrency: int,
    counts: list[int],
    progress: Callable[[str], None],
    on_repeat: Callable[[int, Turns], None],
    engine: str = "plain",
) -> Turns:
    fair.prepare(url, engine)
    turns: Turns = {c: {s: [] for s in fair.SYSTEMS} for c in counts}
    for i in range(repeats):
        for count in order(counts, i):
            for system in fair.SYSTEMS:
                t = fair.turn(
                    url, system, n, concurrency, home / f"turn{i}-p{count}", processes=count
                )
                turns[count][system].append(t)
                progress(
                    f"{count} process(es), {fair.LABELS[system]}, repeat {i + 1}:"
                    f" {t.wf_per_s:.1f} wf/s, {t.commits:.1f} commits per workflow"
                )
        on_repeat(i, turns)
    return turns


def machine() -> str:
    return (
        f"{os.cpu_count()} cores, {platform.system()} {platform.release()},"
        f" Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8],
        help="process counts to measure (default 1 2 4 8)",
    )
    parser.add_argument("--runs", type=int, default=800, help="workflows per turn (default 800)")
    parser.add_argument("--repeats", type=int, default=2, help="turns of each (default 2)")
    fair.add_engine_option(parser)
    fair.add_common_options(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    bad = [c for c in args.processes if c < 1]
    if bad:
        parser.error(f"--processes: every count must be at least 1, not {bad[0]}")
    counts = sorted(set(args.processes))
    fair.apply_sandbox_option(args)
    started = time.monotonic()
    with session(args.database_url, "threadline-bench-scale-") as (url, home):
        harness.make_traversable(home)
        said = fair.sandbox_said(home / "said")
        with psycopg.connect(url) as conn:
            version = conn.execute("show server_version").fetchone()
        print(
            f"Scaling table: {args.runs} workflows of 3 `true` steps per turn, {args.repeats}"
            f" repeat(s), processes {' '.join(map(str, counts))}, concurrency"
            f" {args.concurrency}; engine {args.engine}; steps run {said}; PostgreSQL"
            f" {version[0] if version else '?'}; {machine()}.",
            flush=True,
        )

        def on_repeat(i: int, turns: Turns) -> None:
            print(f"\nafter repeat {i + 1} of {args.repeats}, {time.monotonic() - started:.0f} s:")
            print("\n".join(tables(turns)), flush=True)

        measure(
            url,
            home,
            args.runs,
            args.repeats,
            args.concurrency,
            counts,
            fair.say,
            on_repeat,
            args.engine,
        )
    print(f"\ndone in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
