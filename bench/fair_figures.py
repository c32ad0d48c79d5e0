"""The fair baseline: Threadline against Absurd running each step as the same subprocess.

    .venv/bin/python -m bench.fair_figures [--runs 200] [--repeats 3] [--concurrency 4]
        [--processes 1] [--sandbox auto|none] [--database-url URL]

Three systems take turns on one database of one server, each turn spawning `--runs` workflows of
three steps at once and timing them until the last completed (spawns included):
  - Absurd, each step a subprocess: an absurd_sdk worker process (start_worker at
    `--concurrency` threads) whose three ctx.step calls each run `bash -c true`, the command
    Threadline's bot runs for `run_command: "true"`, through Threadline's own sandbox argv
    (bubblewrap where it works, else what engine_adapter/sandbox detects) with the fittings a
    bot gives each command (its limits, its /tmp on disk: engine_adapter/sandbox/step_fit.py);
    where bubblewrap runs, both sides' steps run without the network (the recipe says
    `network: false`), as `true` needs none and a step given it adds a slirp4netns to either;
  - bare Absurd: the same worker with in-process no-op steps (the engine's ceiling);
  - Threadline: one conductor process (its default executor threads) and one bots process
    (`--concurrency` slots) on the same recipe.
With `--processes N` each system runs N of its processes on the one database: N Absurd workers
(each `--concurrency` threads), N conductor + N bots processes (bench/scale16.py prints the
scaling table over several N); the figures per workflow are summed over all of them.
Each system's processes start before its turn and are killed after it, so no idle poller of one
system is counted in another's turn. Per workflow: Postgres CPU (all its processes, bench/cpu.py),
commits (pg_stat_database.xact_commit, the benchmark's own statements taken off), WAL records
(pg_stat_wal, server-wide), the worker processes' CPU (their commands included) and throughput.
Counts are medians over the turns, times too; on a shared 2-core machine the counts are sound and
the times are noisy. Nothing here asserts a speed.

`python -m bench.fair_figures worker MODE URL CONCURRENCY [INDEX READY_FILE]` is the Absurd worker
process itself (it creates READY_FILE once it is about to claim).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from absurd_sdk import Absurd

from bench import cpu
from bench.bare_figures import ensure_queue
from bench.database import add_database_option, session
from bench.stats import ratio
from bench.threadline_figures import THREE_TRUE
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.sandbox import step_fit
from engine_adapter.sandbox.sandbox import RUNS_DIR_ENV, SANDBOX_ENV, Sandbox, detect
from engine_adapter.store import db, schema
from engine_adapter.testing import harness

Conn = psycopg.Connection[Any]
QUEUE = "benchfair"
TASKS = {"subprocess": "fair.subprocess", "bare": "fair.bare"}
SLUG = "bench-three"  # THREE_TRUE: three `run_command: "true"` steps
COMMAND = ["bash", "-c", "true"]  # what a bot runs for `true` (a builtin: plain_command.py)
POLL_S = 0.02
STATS_SETTLE_S = 1.2  # killed clients' backends exit and report their counts
DEFAULT_CONCURRENCY = 4  # Threadline's default bot slots and conductor executor threads
SYSTEMS = ("subprocess", "bare", "threadline")
LABELS = {
    "subprocess": "Absurd, each step a subprocess",
    "bare": "bare Absurd (in-process steps)",
    "threadline": "Threadline",
}


# -- the Absurd worker process ----------------------------------------------------------------
def worker_main(
    mode: str, url: str, concurrency: int, index: int = 0, ready: Path | None = None
) -> None:
    """An Absurd worker on QUEUE until killed: each step runs COMMAND in the sandbox a bot would
    use (mode subprocess), or nothing (mode bare). `ready` is created just before it claims."""
    engine = Absurd(url, queue_name=QUEUE)
    box = detect()
    workdir = box.workdir("fair-bench-run", None)
    run_dir = box.runs_root / "fair-bench-run"

    def step() -> bool:
        with step_fit.fitted(box, {}, with_network(box), run_dir) as fit:
            subprocess.run(
                box.argv(COMMAND, workdir, fit=fit.fit),
                cwd=workdir,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir)},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                start_new_session=True,
                check=True,
                pass_fds=fit.pass_fds,
                **box.popen_kwargs(),
            )
        return True

    def three(params: dict[str, Any], ctx: Any) -> bool:
        for name in ("a", "b", "c"):
            ctx.step(name, step if mode == "subprocess" else lambda: True)
        return True

    engine.register_task(TASKS[mode])(three)
    if ready is not None:
        ready.touch()
    worker_id = f"fair-{mode}" + (f"-{index}" if index else "")
    engine.start_worker(worker_id=worker_id, concurrency=concurrency, poll_interval=0.05)


def with_network(box: Sandbox) -> bool:
    """Whether the benchmark's steps have the network: not where bubblewrap can take it away
    (`true` needs none; a step given it starts a slirp4netns, on either side alike)."""
    return not box.bwrap


def recipe_text() -> str:
    """THREE_TRUE, saying `network: false` where the steps' sandbox can run without it."""
    return THREE_TRUE if with_network(detect()) else THREE_TRUE + "network: false\n"


# -- measuring --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Turn:
    """One turn of one system, per workflow (times in ms) and its throughput."""

    wf_per_s: float
    pg_cpu_ms: float | None
    worker_cpu_ms: float
    commits: float
    wal_records: float
    spawn_per_s: float  # the turn's spawns, one after another on one connection, while it runs


class Meter:
    """The benchmark's own connection; counts its statements (each commits on its own) so they
    come off the database's commit count."""

    def __init__(self, url: str) -> None:
        self.conn: Conn = psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row)
        self.statements = 0

    def one(self, sql: str, params: Any = None) -> dict[str, Any]:
        self.statements += 1
        row = self.conn.execute(sql, params).fetchone()
        assert row is not None
        return row

    def counters(self) -> tuple[int, int]:
        """(commits in this database, WAL records of the server) as of now."""
        self.one("select pg_stat_clear_snapshot()")
        row = self.one(
            "select (select xact_commit from pg_stat_database where datname = current_database())"
            " as commits, (select wal_records from pg_stat_wal) as wal"
        )
        return int(row["commits"]), int(row["wal"])

    def wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} after {timeout}s")
            time.sleep(POLL_S)


def absurd_done(meter: Meter, task: str, target: int) -> Callable[[], bool]:
    def done() -> bool:
        row = meter.one(
            f"select count(*) filter (where state = 'completed') as done,"
            f" count(*) filter (where state in ('failed', 'cancelled')) as bad"
            f" from absurd.t_{QUEUE} where task_name = %s",
            (task,),
        )
        if row["bad"]:
            raise RuntimeError(f"{row['bad']} {task} task(s) failed")
        return int(row["done"]) >= target

    return done


def threadline_done(meter: Meter, target: int) -> Callable[[], bool]:
    def done() -> bool:
        row = meter.one(
            "select count(*) filter (where state = 'completed') as done,"
            " count(*) filter (where state in ('failed', 'cancelled')) as bad"
            " from threadline.run_threads where workflow = %s",
            (SLUG,),
        )
        if row["bad"]:
            raise RuntimeError(f"{row['bad']} Threadline run(s) failed or were cancelled")
        return int(row["done"]) >= target

    return done


WORKER = [sys.executable, "-m", "bench.fair_figures", "worker"]


@contextmanager
def absurd_system(
    url: str, mode: str, concurrency: int, home: Path, processes: int = 1
) -> Iterator[tuple[list[int], Callable[[Meter, int], None], Callable[[Meter, int], None]]]:
    """The worker processes of one Absurd mode: (their pids, spawn n, wait until n more done),
    once every worker is about to claim."""
    client = Absurd(url, queue_name=QUEUE)
    log = open(home / f"absurd-{mode}.log", "ab")
    readies = [home / f"ready-{mode}-{i}" for i in range(processes)]
    procs = [
        subprocess.Popen(
            [*WORKER, mode, url, str(concurrency), str(i), str(ready)],
            env=dict(os.environ, **{RUNS_DIR_ENV: str(home / "runs")}),
            cwd=Path(__file__).resolve().parent.parent,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for i, ready in enumerate(readies)
    ]
    task = TASKS[mode]
    base = {"done": 0}

    def spawn_n(meter: Meter, n: int) -> None:
        base["done"] = _count(meter, task)
        for _ in range(n):
            client.spawn(task, {}, queue=QUEUE)

    def wait_n(meter: Meter, n: int) -> None:
        meter.wait(absurd_done(meter, task, base["done"] + n), 600, f"{n} {task} tasks")

    try:
        _wait_ready(procs, readies, home / f"absurd-{mode}.log")
        yield [p.pid for p in procs], spawn_n, wait_n
    finally:
        for proc in procs:
            harness.kill(proc)
        log.close()
        client.close()


def _wait_ready(procs: list[subprocess.Popen[bytes]], readies: list[Path], log: Path) -> None:
    """Until every worker has made its ready file; RuntimeError, with the log, if one exits."""
    deadline = time.monotonic() + 60
    while not all(r.exists() for r in readies):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            raise RuntimeError(f"an Absurd worker did not start:\n{log.read_text()[-3000:]}")
        time.sleep(POLL_S)


def _count(meter: Meter, task: str) -> int:
    row = meter.one(
        f"select count(*) as n from absurd.t_{QUEUE} where task_name = %s and state = 'completed'",
        (task,),
    )
    return int(row["n"])


@contextmanager
def threadline_system(
    url: str, concurrency: int, home: Path, processes: int = 1
) -> Iterator[tuple[list[int], Callable[[Meter, int], None], Callable[[Meter, int], None]]]:
    """`processes` conductor + bots pairs: (their pids, spawn n, wait until n more done), once
    every one holds its liveness lock."""
    procs = harness.ProcessSet(url, home)
    base = {"done": 0}
    try:
        started = [procs.start("conductor") for _ in range(processes)]
        started += [
            procs.start("bots", args=["--concurrency", str(concurrency)]) for _ in range(processes)
        ]
        for i, proc in enumerate(started):  # started all at once: N starts cost about one
            procs.wait_started(proc, "conductor" if i < processes else "bots")

        def spawn_n(meter: Meter, n: int) -> None:
            meter.statements += 1
            base["done"] = int(
                meter.conn.execute(
                    "select count(*) as n from threadline.run_threads"
                    " where workflow = %s and state = 'completed'",
                    (SLUG,),
                ).fetchone()["n"]  # type: ignore[index]
            )
            # As Threadline's own doors spawn: their wake-ups go out after each commit.
            with db.connect(url) as c:
                for _ in range(n):
                    spawn(c, SLUG)

        def wait_n(meter: Meter, n: int) -> None:
            meter.wait(threadline_done(meter, base["done"] + n), 600, f"{n} Threadline runs")

        yield [p.pid for p in started], spawn_n, wait_n
    except Exception:
        print("benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
        raise
    finally:
        procs.kill_all()


def turn(
    url: str,
    system: str,
    n: int,
    concurrency: int,
    home: Path,
    meter_of: Callable[[str], Meter] = Meter,
    processes: int = 1,
) -> Turn:
    """One system's turn: start its processes (`processes` of each kind), warm up, time n
    workflows, stop them, count (`meter_of`: the benchmark's connection, which reads the
    counts)."""
    if system == "threadline":
        ctx = threadline_system(url, concurrency, home / "threadline", processes)
    else:
        (home / system).mkdir(parents=True, exist_ok=True)
        ctx = absurd_system(url, system, concurrency, home / system, processes)
    meter = meter_of(url)
    try:
        with ctx as (pids, spawn_n, wait_n):
            spawn_n(meter, 2 * processes)  # warm-up: connections, caches, the first claims
            wait_n(meter, 2 * processes)
            time.sleep(STATS_SETTLE_S)
            own_before = meter.statements
            commits0, wal0 = meter.counters()
            pg0 = cpu.server_cpu_s(meter.conn)
            workers0 = cpu.process_cpu_s(pids)
            started = time.perf_counter()
            spawn_n(meter, n)
            spawned = time.perf_counter() - started
            wait_n(meter, n)
            elapsed = time.perf_counter() - started
            workers = cpu.process_cpu_s(pids) - workers0
        time.sleep(STATS_SETTLE_S)  # the killed workers' backends have exited and reported
        pg1 = cpu.server_cpu_s(meter.conn)
        own = meter.statements - own_before  # counters() below: its two statements not yet seen
        commits1, wal1 = meter.counters()
    finally:
        meter.conn.close()
    pg = None if pg0 is None or pg1 is None else (pg1 - pg0) * 1000 / n
    return Turn(
        n / elapsed,
        pg,
        workers * 1000 / n,
        (commits1 - commits0 - own) / n,
        (wal1 - wal0) / n,
        n / spawned,
    )


# -- the report -------------------------------------------------------------------------------
FIGURES: list[tuple[str, str, str, str]] = [
    # (Turn field, label, format, the target for Threadline / the subprocess baseline)
    ("pg_cpu_ms", "Postgres CPU ms per workflow", "{:.1f}", "<= 2.0x"),
    ("commits", "commits per workflow", "{:.1f}", "<= 20 commits"),
    ("wal_records", "WAL records per workflow", "{:.0f}", "<= 150 records"),
    ("worker_cpu_ms", "worker CPU ms per workflow", "{:.1f}", "<= 2.5x (commands included)"),
    ("wf_per_s", "throughput, workflows/s", "{:.1f}", ">= 0.7x (at 8 process pairs, 16 cores)"),
    ("spawn_per_s", "spawn (enqueue), workflows/s on one connection", "{:.0f}", ">= 0.5x"),
]


def medians(turns: list[Turn], field: str) -> float | None:
    values = [getattr(t, field) for t in turns]
    return None if any(v is None for v in values) else statistics.median(values)


@dataclass(frozen=True)
class Figure:
    """One figure's medians by system, formatted, with Threadline's ratio to the subprocess
    baseline and the issue's target."""

    label: str
    cells: dict[str, str]
    ratio: str
    target: str


def figures(turns: dict[str, list[Turn]]) -> list[Figure]:
    out = []
    for field, label, fmt, target in FIGURES:
        values = {s: medians(turns[s], field) for s in SYSTEMS}
        cells = {s: "-" if v is None else fmt.format(v) for s, v in values.items()}
        ours, base = values["threadline"], values["subprocess"]
        said = "-" if ours is None or base is None else f"{ratio(ours, base)}x"
        out.append(Figure(label, cells, said, target))
    return out


def caveat(n: int, repeats: int, concurrency: int, sandbox: str, processes: int = 1) -> list[str]:
    pairs = f"; {processes} Absurd workers / {processes} conductor + bots pairs"
    several = pairs if processes > 1 else ""
    return [
        f"Fair baseline: {n} workflows of 3 `true` steps spawned at once, each system's turn in"
        f" its own processes, {repeats} turn(s) each, medians; concurrency {concurrency}"
        f" (Absurd worker threads = Threadline bot slots){several}; steps run {sandbox}.",
        "Counts (commits, WAL records) are sound here; times (CPU, throughput) are noisy on a"
        " shared 2-core machine: compare them only within one run. WAL records are the server's:"
        " other work on it adds to them, which a few workflows (--smoke) do not outweigh.",
    ]


def report(
    turns: dict[str, list[Turn]], n: int, concurrency: int, sandbox: str, processes: int = 1
) -> list[str]:
    out = caveat(n, len(turns["threadline"]), concurrency, sandbox, processes)
    head = ["figure", *(LABELS[s] for s in SYSTEMS), "Threadline / subprocess", "target"]
    rows = [head] + [
        [f.label, *(f.cells[s] for s in SYSTEMS), f.ratio, f.target] for f in figures(turns)
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def prepare(url: str, engine: str = "plain") -> None:
    """The recipe Threadline runs, the queue Absurd's workers claim from, and Absurd's runtime
    functions for Threadline's queue as `engine` says (`threadline db migrate --engine`)."""
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        apply_recipe(conn, load_recipe_text(recipe_text()))
        schema.set_engine(conn, specialised=engine == "specialised")
    ensure_queue(url, QUEUE)


def measure(
    url: str,
    home: Path,
    n: int,
    repeats: int,
    concurrency: int,
    progress: Callable[[str], None],
    processes: int = 1,
    engine: str = "plain",
) -> dict[str, list[Turn]]:
    prepare(url, engine)
    turns: dict[str, list[Turn]] = {s: [] for s in SYSTEMS}
    for i in range(repeats):
        for system in SYSTEMS:  # interleaved: a noisy moment hits every system
            t = turn(url, system, n, concurrency, home / f"turn{i}", processes=processes)
            turns[system].append(t)
            progress(
                f"fair: {LABELS[system]}, turn {i + 1}: {t.wf_per_s:.1f} wf/s,"
                f" {t.commits:.1f} commits, {t.wal_records:.0f} WAL records per workflow"
            )
    return turns


def sandbox_said(runs_root: Path) -> str:
    """How the steps run here (detect() reads its runs directory from the environment)."""
    before = os.environ.get(RUNS_DIR_ENV)
    os.environ[RUNS_DIR_ENV] = str(runs_root)
    try:
        return detect().describe()
    finally:
        if before is None:
            del os.environ[RUNS_DIR_ENV]
        else:
            os.environ[RUNS_DIR_ENV] = before


def say(text: str) -> None:
    print(f"  .. {text}", flush=True)


def run(
    database_url: str | None,
    n: int,
    repeats: int,
    concurrency: int,
    progress: Callable[[str], None] = say,
    processes: int = 1,
    engine: str = "plain",
) -> tuple[dict[str, list[Turn]], str]:
    """Every turn of every system, and where their steps ran, on a fresh database."""
    with session(database_url, "threadline-bench-fair-") as (url, home):
        harness.make_traversable(home)
        said = sandbox_said(home / "said")
        turns = measure(url, home, n, repeats, concurrency, progress, processes, engine)
        return turns, said


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """--concurrency, --sandbox and --database-url, as this script and bench/scale16 take them."""
    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help="Absurd worker threads / Threadline bot slots",
    )
    parser.add_argument(
        "--sandbox",
        choices=("auto", "none"),
        default="auto",
        help="none: every system's steps unsandboxed (THREADLINE_SANDBOX=none)",
    )
    add_database_option(parser)


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=("plain", "specialised"),
        default="plain",
        help="Absurd's runtime functions for Threadline's queue (threadline db migrate --engine)",
    )


def apply_sandbox_option(args: argparse.Namespace) -> None:
    if args.sandbox == "none":
        os.environ[SANDBOX_ENV] = "none"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        index, ready = (int(argv[4]), Path(argv[5])) if len(argv) > 4 else (0, None)
        worker_main(argv[1], argv[2], int(argv[3]), index, ready)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="workflows per turn (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="turns of each system (default 3)")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="Absurd worker processes / Threadline conductor + bots pairs (default 1)",
    )
    add_engine_option(parser)
    add_common_options(parser)
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error(f"--processes must be at least 1, not {args.processes}")
    apply_sandbox_option(args)
    turns, said = run(
        args.database_url,
        args.runs,
        args.repeats,
        args.concurrency,
        processes=args.processes,
        engine=args.engine,
    )
    print("\n".join(report(turns, args.runs, args.concurrency, said, args.processes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
