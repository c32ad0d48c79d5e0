"""Threadline benchmarks: print throughput and latency figures next to bare Absurd's.

    python bench/run.py [--smoke] [--database-url URL]

Without --database-url a private embedded Postgres is started in a temp home and removed at the
end. With it, URL must be allowed to create databases: a fresh tl_bench_* database is created,
migrated, and dropped again. Nothing here asserts a speed; the figures are printed only. Last
comes the chaos benchmark (bench/chaos.py): it exits 1 when a run is lost or a side effect repeats
beyond the attempts its thread shows.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

# Run as a script (`python bench/run.py`): make the repository root importable for `bench.*`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import agent_figures as agent
from bench import bare_figures as bare
from bench import chaos, cpu, spawn_figures
from bench import console_figures as console
from bench import fair_figures as fair
from bench import parallel_figures as parallel
from bench import scale_figures as scale
from bench import step_trace as trace
from bench import threadline_figures as tl
from bench.database import add_database_option, embedded_server, fresh_database
from bench.stats import Summary, ratio
from engine_adapter.model.settings import application_name
from engine_adapter.store import db
from engine_adapter.testing import harness

HEADER = """\
Threadline benchmark ({mode})
  Threadline: 1 conductor process + 1 bot process (default concurrency); every step is a
  conductor SEND, a bot turn (a `true` subprocess) and thread writes, woken by LISTEN/NOTIFY.
  Bare Absurd: absurd_sdk tasks on queue {queue!r} in the same database; steps are in-process
  no-op ctx.step() calls, the worker is a thread of this process (no bot, no thread writes).
  Parallel: a parallel group's branches (child runs) against the same steps in sequence, with
  a bot slot per branch.
  Latencies use the database clock; 2 shared cores, so expect noise."""


@dataclass(frozen=True)
class Sizes:
    throughput_runs: int
    sequential_runs: int
    gate_samples: int
    recovery_samples: int
    timeout_s: float
    page_samples: int
    seeded_runs: int
    query_repeats: int
    parallel_branches: int  # a parallel group of `sleep 1` branches against them in sequence
    parallel_repeats: int
    agent_turns: int  # tool-calling turns per agent run, against a scripted model
    agent_runs: int
    in_flight: tuple[int, ...]  # runs in flight for step -> next step, by executor threads
    trace_runs: int  # runs of five steps whose statements are counted, one at a time
    fair_runs: int  # workflows per turn against Absurd running each step as a subprocess
    fair_repeats: int
    spawns: int  # spawns per round on one connection, alone (bench/spawn_figures)
    spawn_rounds: int
    chaos: chaos.ChaosSizes


SMOKE = Sizes(
    throughput_runs=10,
    sequential_runs=3,
    gate_samples=5,
    recovery_samples=1,
    timeout_s=30,
    page_samples=5,
    seeded_runs=20_000,
    query_repeats=3,
    parallel_branches=4,
    parallel_repeats=1,
    agent_turns=5,
    agent_runs=2,
    in_flight=(1, 10),
    trace_runs=2,
    fair_runs=3,
    fair_repeats=1,
    spawns=50,
    spawn_rounds=1,
    chaos=chaos.SMOKE,
)
FULL = Sizes(
    throughput_runs=50,
    sequential_runs=10,
    gate_samples=20,
    recovery_samples=3,
    timeout_s=120,
    page_samples=30,
    seeded_runs=100_000,
    query_repeats=10,
    parallel_branches=20,
    parallel_repeats=3,
    agent_turns=10,
    agent_runs=10,
    in_flight=(1, 10, 50),
    trace_runs=10,
    fair_runs=200,
    fair_repeats=3,
    spawns=1000,
    spawn_rounds=3,
    chaos=chaos.FULL,
)

Row = tuple[str, str, str, str]  # figure, threadline, bare, ratio
Conn = psycopg.Connection[Any]


def progress(text: str) -> None:
    print(f"  .. {text}", flush=True)


def latency_ratio(ours: Summary, theirs: Summary) -> str:
    return f"p50 {ratio(ours.median, theirs.median)}  p90 {ratio(ours.p90, theirs.p90)}"


# -- the four figures -------------------------------------------------------------------------
def throughput_rows(
    url: str, conn: Conn, sizes: Sizes, workers: dict[str, subprocess.Popen[bytes]]
) -> tuple[list[Row], tl.Throughput]:
    """Steps per second, and the CPU per run of Postgres and of the workers: Threadline's
    conductor and bots processes, bare Absurd's worker thread (this process: its spawns and
    polling count too, as Threadline's spawns count in Postgres' share); then where ours went,
    and what the whole machine spent."""
    n, timeout = sizes.throughput_runs, sizes.timeout_s
    tl.one_at_a_time(conn, 1, timeout)  # warm-up: first claims, connections, caches
    progress(f"throughput: {n} Threadline runs of 3 `true` steps")
    pids = {kind: proc.pid for kind, proc in workers.items()}
    split_before = {kind: cpu.own_and_children_s(pid) for kind, pid in pids.items()}
    backends_before, busy_before = cpu.backends_cpu_s(conn), cpu.machine_busy_s()
    pg_before = cpu.server_cpu_s(conn)
    ours = tl.throughput(conn, n, timeout)
    pg_ours = _per_run(pg_before, cpu.server_cpu_s(conn), n)
    busy_ours = (cpu.machine_busy_s() - busy_before) / n
    serving = cpu.backends_delta_by_app(backends_before, cpu.backends_cpu_s(conn))
    split = {
        kind: tuple(
            (a - b) / n
            for a, b in zip(cpu.own_and_children_s(pid), split_before[kind], strict=True)
        )
        for kind, pid in pids.items()
    }
    worker_ours = sum(sum(own_and_children) for own_and_children in split.values())
    progress(f"throughput: {n} bare Absurd tasks of 3 no-op steps")
    bare.throughput(url, 1, timeout)  # warm-up, as above
    pg_before, bare_before = cpu.server_cpu_s(conn), time.process_time()
    busy_before = cpu.machine_busy_s()
    bare_s = bare.throughput(url, n, timeout)
    pg_bare = _per_run(pg_before, cpu.server_cpu_s(conn), n)
    worker_bare = (time.process_time() - bare_before) / n
    busy_bare = (cpu.machine_busy_s() - busy_before) / n
    bare_sps = n * tl.STEPS_PER_RUN / bare_s
    rows = [
        (
            f"throughput, {n} runs x 3 steps",
            f"{ours.steps_per_s:.1f} steps/s",
            f"{bare_sps:.1f} steps/s",
            ratio(ours.steps_per_s, bare_sps),
        ),
        (
            "  Postgres CPU per run",
            "-" if pg_ours is None else f"{pg_ours * 1000:.1f} ms",
            "-" if pg_bare is None else f"{pg_bare * 1000:.1f} ms",
            "-" if pg_ours is None or pg_bare is None else ratio(pg_ours, pg_bare),
        ),
        (
            "  worker CPU per run",
            f"{worker_ours * 1000:.1f} ms",
            f"{worker_bare * 1000:.1f} ms",
            f"{ratio(worker_ours, worker_bare)} (ours: conductor + bots, commands included)",
        ),
        (
            "  the machine's busy CPU per run",
            f"{busy_ours * 1000:.1f} ms",
            f"{busy_bare * 1000:.1f} ms",
            f"{ratio(busy_ours, busy_bare)} (every process, the benchmark's own included)",
        ),
    ]
    rows.append(
        (
            "  ours: conductor / bots / commands",
            f"{split['conductor'][0] * 1000:.1f} / {split['bots'][0] * 1000:.1f} / "
            f"{split['bots'][1] * 1000:.1f} ms",
            "-",
            "commands: each step's process and its sandbox, as far as their CPU times show",
        )
    )
    if serving:
        apps = [application_name(kind) for kind in ("conductor", "bots")]
        rest = sum(v for app, v in serving.items() if app not in apps)
        shares = [serving.get(app, 0.0) / n * 1000 for app in apps] + [rest / n * 1000]
        rows.append(
            (
                "  Postgres serving conductor / bots / rest",
                " / ".join(f"{v:.1f}" for v in shares) + " ms",
                "-",
                "the rest: the benchmark's spawns and polling; background work not counted",
            )
        )
    return rows, ours


def _per_run(before: float | None, after: float | None, runs: int) -> float | None:
    return None if before is None or after is None else (after - before) / runs


def step_rows(conn: Conn, sizes: Sizes, loaded: tl.Throughput) -> list[Row]:
    progress(f"step latency: {sizes.sequential_runs} runs one at a time")
    sequential = tl.one_at_a_time(conn, sizes.sequential_runs, sizes.timeout_s)
    rows: list[Row] = []
    for label, run_ids in (
        ("one run at a time", sequential),
        (f"{loaded.runs} concurrent runs", loaded.run_ids),
    ):
        step_to_step, turn = tl.step_latencies(conn, run_ids)
        note = (
            "target p50 <= 25 ms"
            if run_ids is sequential
            else "queued behind the other runs (one conductor)"
        )
        rows.append((f"step->step ({label})", Summary.of(step_to_step).fmt(1000), "-", note))
        rows.append((f"instruction->terminal ({label})", Summary.of(turn).fmt(1000), "-", ""))
    return rows


def gate_rows(url: str, conn: Conn, sizes: Sizes) -> list[Row]:
    n = sizes.gate_samples
    progress(f"gate release: {n} Threadline gates approved by reply")
    ours = tl.gate_release(url, conn, n, sizes.timeout_s)
    ours_return, ours_entry = Summary.of(ours[0]), Summary.of(ours[1])
    progress(f"gate release: {n} bare tasks woken by emit_event (worker polls every 0.25 s)")
    theirs = bare.event_release(url, n, sizes.timeout_s)
    bare_return, bare_entry = Summary.of(theirs[0]), Summary.of(theirs[1])
    return [
        (
            "gate release, from reply/emit return",
            ours_return.fmt(1000),
            bare_return.fmt(1000),
            latency_ratio(ours_return, bare_return),
        ),
        (
            "gate release, from reply entry/emitted_at",
            ours_entry.fmt(1000),
            bare_entry.fmt(1000),
            latency_ratio(ours_entry, bare_entry),
        ),
    ]


def recovery_rows(
    procs: harness.ProcessSet, conn: Conn, conductor: subprocess.Popen[bytes], sizes: Sizes
) -> list[Row]:
    samples = []
    for i in range(sizes.recovery_samples):
        progress(f"recovery {i + 1}/{sizes.recovery_samples}: SIGKILL the conductor mid `sleep 2`")
        sample, conductor = tl.recovery(procs, conn, conductor, sizes.timeout_s)
        samples.append(sample)
    restart = Summary.of([s.restart_to_instruction_s for s in samples])
    ready = Summary.of([s.restart_to_ready_s for s in samples])
    tail = Summary.of([s.terminal_to_instruction_s for s in samples])
    return [
        (
            "recovery, restart->next instruction",
            restart.fmt(1, "s", 2),
            "-",
            "target <= 5 s; includes the rest of `sleep 2`",
        ),
        ("  of which restart->conductor live", ready.fmt(1, "s", 2), "-", ""),
        ("  bot terminal->next instruction", tail.fmt(1000), "-", "(or restart->, if later)"),
    ]


def measure(url: str, procs: harness.ProcessSet, sizes: Sizes) -> list[Row]:
    with db.connect(url) as conn:
        tl.apply_recipes(conn)
        bare.ensure_queue(url)
        try:
            conductor = procs.start("conductor")
            bots = procs.start("bots")
            procs.wait_alive("conductor", timeout=sizes.timeout_s)
            procs.wait_alive("bots", timeout=sizes.timeout_s)
            workers = {"conductor": conductor, "bots": bots}
            rows, loaded = throughput_rows(url, conn, sizes, workers)
            rows += step_rows(conn, sizes, loaded)
            rows += gate_rows(url, conn, sizes)
            rows += recovery_rows(procs, conn, conductor, sizes)
            return rows
        except Exception:
            print("benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
            raise
        finally:
            procs.kill_all()


def console_rows(url: str, procs: harness.ProcessSet, sizes: Sizes) -> list[Row]:
    with db.connect(url) as conn:
        try:
            progress(f"console: {sizes.page_samples} changes until visible in headless Chromium")
            seen = console.change_to_page(procs, conn, sizes.page_samples)
        finally:
            procs.kill_all()
        if isinstance(seen, str):
            rows: list[Row] = [("console: change -> visible in page", seen, "-", "")]
        else:
            rows = [
                (
                    "console: thread entry commit -> visible",
                    seen["entry"].fmt(1000),
                    "-",
                    "target p50 <= 0.5 s; others poll every 1-15 s",
                ),
                ("console: run state commit -> visible", seen["state"].fmt(1000), "-", ""),
            ]
        progress(
            f"console: seeding {sizes.seeded_runs:,} runs, then timing the runs page's queries"
        )
        seed_s, queries = console.list_queries(conn, sizes.seeded_runs, sizes.query_repeats)
    rows.append((f"seed {sizes.seeded_runs:,} runs (set-based SQL)", f"{seed_s:.1f} s", "-", ""))
    rows += [
        (
            f"runs page, {sizes.seeded_runs:,} runs: {name}",
            summary.fmt(1000),
            "-",
            "server-side query",
        )
        for name, summary in queries.items()
    ]
    return rows


def parallel_rows(url: str, home: Path, sizes: Sizes) -> list[Row]:
    n = sizes.parallel_branches
    progress(f"parallel: {n} branches of `sleep 1` against {n} such steps in sequence")
    figures = parallel.measure(url, home, n, sizes.parallel_repeats, sizes.timeout_s + 2 * n)
    return [
        (
            f"{n} x `sleep 1`, parallel group ({n} child runs)",
            figures.parallel.fmt(1, "s", 2),
            "-",
            f"sequential / parallel {figures.speedup} (perfect: {n})",
        ),
        (f"{n} x `sleep 1`, in sequence", figures.sequential.fmt(1, "s", 2), "-", ""),
    ]


def agent_rows(url: str, home: Path, sizes: Sizes) -> list[Row]:
    n, turns = sizes.agent_runs, sizes.agent_turns
    progress(f"agents: {n} runs of {turns} tool turns against a scripted model (answers at once)")
    figures = agent.measure(url, home, turns, n, sizes.timeout_s)
    return [
        ("agent model turn (model latency ~0)", figures.model_turn.fmt(1000), "-", "per turn"),
        ("agent tool turn (run_command `true`)", figures.tool_turn.fmt(1000), "-", ""),
        ("agent whole turn", figures.whole_turn.fmt(1000), "-", ""),
    ]


def scale_rows(url: str, home: Path, sizes: Sizes) -> list[Row]:
    progress(f"scale: step -> next step with {sizes.in_flight} runs in flight, 1 and 4 threads")
    figures = scale.measure(url, home, list(sizes.in_flight), [1, 4], 1, sizes.timeout_s * 4)
    rows: list[Row] = []
    for n in sizes.in_flight:
        one, four = figures.by_size[1, n], figures.by_size[4, n]
        rows.append(
            (
                f"step -> next step, {n} in flight, 4 executor threads",
                four.fmt(1000),
                "-",
                f"1 thread: p50 {one.median * 1000:.1f} ms ({ratio(one.median, four.median)}x)",
            )
        )
    commits, wal = figures.per_workflow
    rows.append(
        (
            f"database work per run of {scale.STEPS} steps (all processes)",
            f"{commits:.0f} commits, {wal:.0f} WAL records",
            "-",
            "",
        )
    )
    return rows


def trace_rows(sizes: Sizes) -> list[Row]:
    progress(f"trace: every statement of {sizes.trace_runs} five-step runs (a server of its own)")
    tallies, timed, steps = trace.measure(sizes.trace_runs, top=1000)
    rows: list[Row] = []
    for app, t in sorted(tallies.items()):
        rows.append(
            (
                f"per step: {app}",
                f"{t.statements / steps:.1f} statements, {t.transactions / steps:.1f} transactions",
                "-",
                "",
            )
        )
    sent_ms = sum(t.ms for t in timed if not t.nested)
    rows.append(
        ("per step: Postgres execution time", f"{sent_ms:.2f} ms", "-", "bench/step_trace.py")
    )
    return rows


def fair_rows(server_url: str, sizes: Sizes) -> list[Row]:
    n, repeats = sizes.fair_runs, sizes.fair_repeats
    progress(
        f"fair baseline: {n} workflows x {repeats} turn(s) of each system (bench/fair_figures)"
    )
    turns, said = fair.run(server_url, n, repeats, fair.DEFAULT_CONCURRENCY, progress)
    rows: list[Row] = [
        ("fair baseline (bench/fair_figures.py)", "Threadline", "subprocess / bare", said),
    ]
    for f in fair.figures(turns):
        rows.append(
            (
                f"  {f.label}",
                f.cells["threadline"],
                f"{f.cells['subprocess']} / {f.cells['bare']}",
                f"{f.ratio} subprocess; target {f.target}",
            )
        )
    rows.append(
        ("  (counts are sound at full size; times are noisy on 2 shared cores)", "", "", "")
    )
    return rows


def spawn_rows(server_url: str, sizes: Sizes) -> list[Row]:
    n, rounds = sizes.spawns, sizes.spawn_rounds
    progress(f"spawn alone: {n} spawns x {rounds} round(s) on one connection (bench/spawn_figures)")
    with fresh_database(server_url) as url:
        rates = spawn_figures.measure(url, n, rounds, progress)
    return [
        (
            f"spawn alone, {system}",
            f"{median:.0f}/s",
            f"{absurd:.0f}/s",
            f"{ratio(median, absurd)}x Absurd's; "
            + ("no real caller drops it" if system == spawn_figures.DROPPED else "target >= 0.5x"),
        )
        for system, median, absurd in spawn_figures.medians(rates)
        if system != "absurd"
    ]


def print_table(rows: list[Row]) -> None:
    head: Row = ("figure", "threadline", "bare absurd", "ratio / note")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(3)]
    for r in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) + "  " + r[3])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="small sizes, well under a minute (CI)"
    )
    add_database_option(parser)
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    chaos.exit_on_sigterm()
    started = time.perf_counter()
    print(HEADER.format(mode="smoke" if args.smoke else "full", queue=bare.QUEUE), flush=True)
    with ExitStack() as stack:
        server_url = args.database_url or stack.enter_context(embedded_server())
        url = stack.enter_context(fresh_database(server_url))
        progress(f"database ready after {time.perf_counter() - started:.1f} s")
        home = Path(tempfile.mkdtemp(prefix="threadline-bench-home-"))
        stack.callback(shutil.rmtree, home, ignore_errors=True)
        rows = measure(url, harness.ProcessSet(url, home), sizes)
        # Before the console's seeding: WAL records are counted server-wide, and the
        # autovacuum of 20,000 seeded runs would land in the fair baseline's turns.
        rows += fair_rows(server_url, sizes)
        rows += spawn_rows(server_url, sizes)
        console_url = stack.enter_context(fresh_database(server_url))
        rows += console_rows(console_url, harness.ProcessSet(console_url, home), sizes)
        parallel_url = stack.enter_context(fresh_database(server_url))
        rows += parallel_rows(parallel_url, home / "parallel", sizes)
        agent_url = stack.enter_context(fresh_database(server_url))
        rows += agent_rows(agent_url, home / "agent", sizes)
        scale_url = stack.enter_context(fresh_database(server_url))
        rows += scale_rows(scale_url, home / "scale", sizes)
        rows += trace_rows(sizes)
        chaos_url = stack.enter_context(fresh_database(server_url))
        outcome = chaos.run_chaos(chaos_url, home / "chaos", sizes.chaos, progress=progress)
    print()
    print_table(rows)
    print()
    print("\n".join(outcome.lines()))
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    if not outcome.ok:
        print(
            "chaos: a run was lost or a step's effect repeated unseen (see above)", file=sys.stderr
        )
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
