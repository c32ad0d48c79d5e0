"""Chaos benchmark: runs with side-effecting steps while random SIGKILLs hit conductors and bots.

    python bench/chaos.py [--runs 120] [--kills 40] [--conductors 3] [--bots 3] [--smoke]

Several conductor and bot processes serve a private embedded PostgreSQL. Runs are spawned across
the kill window; after each SIGKILL a replacement starts at once (as `threadline up` restarts a
child), so the set stays at strength. Each step appends its step key to a file in the recipe's
working directory, then sleeps, so kills land mid-command. Exits 1 when a run is lost, an
instruction or a final result is duplicated, or a side effect repeats beyond the attempts its
thread shows; everything started here is killed and removed at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

# Run as a script (`python bench/chaos.py`): make the repository root importable for `bench.*`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chaos_report import QUERIES, ChaosReport, collect, figure_lines
from bench.database import embedded_server, fresh_database
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db, roles
from engine_adapter.testing import harness

SLUG = "bench-chaos"
EFFECTS_FILE = "side-effects"
STEP_IDS = ("one", "two", "three")
# The line is written mid-command, between two naps: a kill before it leaves no trace, a kill
# after it leaves a line that the next, visible, attempt repeats.
STEP_COMMAND = f'sleep 0.1 && echo "$THREADLINE_STEP_KEY" >> {EFFECTS_FILE} && sleep 0.1'
KINDS = ("conductor", "bots")
ENDED = ("completed", "failed", "cancelled")
Process = subprocess.Popen[bytes]


@dataclass(frozen=True)
class ChaosSizes:
    runs: int
    kills: int
    conductors: int
    bots: int
    bot_concurrency: int = 2
    kill_every_s: float = 0.8  # mean pause between kills (uniform, 0.5x to 1.5x)
    timeout_s: float = 120.0  # after the last kill, for every run to finish
    max_in_flight: int = 0  # spawns wait while this many runs are unfinished (0: never wait)


SMOKE = ChaosSizes(runs=12, kills=6, conductors=2, bots=2, timeout_s=60.0)
FULL = ChaosSizes(runs=120, kills=40, conductors=3, bots=3)


def recipe_text(workdir: Path) -> str:
    steps = "\n".join(f"  - id: {sid}\n    run_command: '{STEP_COMMAND}'" for sid in STEP_IDS)
    return f"slug: {SLUG}\nworkdir: {workdir}\nsteps:\n{steps}\n"


def shared_workdir() -> Path:
    """The recipe's working directory, apart from any Threadline home and writable by any user,
    so a step run as an unprivileged user (or in a sandbox that sees only this directory) can
    still leave its line."""
    path = Path(tempfile.mkdtemp(prefix="threadline-chaos-work-"))
    path.chmod(0o777)
    return path


class Crew:
    """Conductor and bot processes kept at strength: a killed or exited one is replaced at once."""

    def __init__(self, procs: harness.ProcessSet, sizes: ChaosSizes) -> None:
        self.procs = procs
        self.strength = {"conductor": sizes.conductors, "bots": sizes.bots}
        self.env = {"bots": {"THREADLINE_BOT_CONCURRENCY": str(sizes.bot_concurrency)}}
        self.members: dict[str, list[Process]] = {kind: [] for kind in KINDS}
        self.kills = dict.fromkeys(KINDS, 0)
        self.unasked_exits = 0  # processes that died without being killed here
        self.spared: set[Process] = set()  # never chosen to be killed (a soak's witnesses)

    def muster(self, timeout: float) -> None:
        for kind in KINDS:
            while len(self.members[kind]) < self.strength[kind]:
                self.members[kind].append(self.procs.start(kind, env=self.env.get(kind)))
            self.procs.wait_alive(kind, self.strength[kind], timeout=timeout)

    def kill_one(self, rng: random.Random) -> None:
        kind = rng.choice(KINDS)
        victim = rng.choice([p for p in self.members[kind] if p not in self.spared])
        harness.kill(victim)
        self.kills[kind] += 1
        self.replace(kind, victim)

    def replace_exited(self) -> None:
        for kind in KINDS:
            for proc in [p for p in self.members[kind] if p.poll() is not None]:
                self.unasked_exits += 1
                self.replace(kind, proc)

    def replace(self, kind: str, gone: Process) -> None:
        self.members[kind].remove(gone)
        self.members[kind].append(self.procs.start(kind, env=self.env.get(kind)))


def unleash(conn: Any, crew: Crew, sizes: ChaosSizes, rng: random.Random) -> list[str]:
    """Spawn the runs spread over the kill window, one batch before each pause; returns their
    ids."""
    run_ids: list[str] = []
    for i in range(max(sizes.kills, 1)):
        due = sizes.runs if sizes.kills == 0 else round((i + 1) * sizes.runs / sizes.kills)
        while len(run_ids) < due:
            if sizes.max_in_flight:
                wait_for_room(conn, crew, sizes.max_in_flight)
            run_ids.append(spawn(conn, SLUG).run_id)
        if sizes.kills:
            time.sleep(rng.uniform(0.5, 1.5) * sizes.kill_every_s)
            crew.replace_exited()
            crew.kill_one(rng)
    return run_ids


def wait_for_room(conn: Any, crew: Crew, most: int) -> None:
    """Until fewer than `most` runs are unfinished (a soak keeps a steady load, not a pile)."""
    while conn.execute(QUERIES["chaos_unfinished"], {"slug": SLUG}).fetchone()["runs"] >= most:
        crew.replace_exited()
        time.sleep(0.1)


def wait_finished(conn: Any, crew: Crew, run_ids: list[str], timeout: float) -> None:
    """Until every run has ended (completed, failed or cancelled) or the time is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crew.replace_exited()
        states = conn.execute(QUERIES["chaos_run_states"], {"run_ids": run_ids}).fetchall()
        if sum(r["runs"] for r in states if r["state"] in ENDED) == len(run_ids):
            return
        time.sleep(0.2)


@dataclass(frozen=True)
class ChaosOutcome:
    report: ChaosReport
    kills: dict[str, int]
    unasked_exits: int
    sizes: ChaosSizes

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.unasked_exits

    def lines(self) -> list[str]:
        s, k = self.sizes, self.kills
        return [
            (
                f"chaos: {s.runs} runs x {len(STEP_IDS)} side-effecting steps;"
                f" {s.conductors} conductors + {s.bots} bot processes"
                f" ({s.bot_concurrency} slots each)"
            ),
            *figure_lines(
                [
                    (
                        "SIGKILLs",
                        (
                            f"{sum(k.values())}  (conductor {k['conductor']},"
                            f" bots {k['bots']}; each replaced at once;"
                            f" exits nobody asked for {self.unasked_exits})"
                        ),
                    )
                ]
            ),
            *self.report.lines(),
        ]


class Companion(Protocol):
    """Work done alongside the chaos (the soak's cleanup and memory samples), from the moment
    the crew is mustered until every run has finished."""

    def start(self, crew: Crew) -> None: ...

    def stop(self) -> None: ...


def run_chaos(
    url: str,
    home: Path,
    sizes: ChaosSizes,
    seed: int | None = None,
    progress: Any = print,
    companion: Companion | None = None,
) -> ChaosOutcome:
    """The benchmark against a migrated database; every process it starts is dead on return."""
    rng = random.Random(seed)
    with db.connect(url) as conn:  # each process connects as its kind's role, as under `up`
        logins = roles.grant_logins(conn)
    workdir = shared_workdir()
    procs = harness.ProcessSet(url, home, logins=logins, workdirs=[workdir])
    try:
        with db.connect(url) as conn:
            apply_recipe(conn, load_recipe_text(recipe_text(workdir)))
            crew = Crew(procs, sizes)
            crew.muster(timeout=sizes.timeout_s)
            progress(
                f"chaos: {sizes.runs} runs under {sizes.kills} SIGKILLs"
                f" ({sizes.conductors} conductors + {sizes.bots} bot processes)"
            )
            if companion is not None:
                companion.start(crew)
            try:
                run_ids = unleash(conn, crew, sizes, rng)
                progress("chaos: kills done; waiting for every run to finish")
                wait_finished(conn, crew, run_ids, sizes.timeout_s)
            finally:
                if companion is not None:
                    companion.stop()
            procs.kill_all()
            time.sleep(0.5)  # a step process orphaned by its killed bot would write by now
            report = collect(conn, run_ids, workdir / EFFECTS_FILE)
        outcome = ChaosOutcome(report, dict(crew.kills), crew.unasked_exits, sizes)
        if not outcome.ok:
            print("chaos found a problem; process logs:\n" + procs.log_tails(), file=sys.stderr)
        return outcome
    except Exception:
        print("chaos benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
        raise
    finally:
        procs.kill_all()
        shutil.rmtree(workdir, ignore_errors=True)


def exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the clean-up below still runs."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the small size the test command runs")
    parser.add_argument("--runs", type=int, help=f"runs to spawn (default {FULL.runs})")
    parser.add_argument("--kills", type=int, help=f"SIGKILLs to deal (default {FULL.kills})")
    parser.add_argument(
        "--conductors", type=int, help=f"conductor processes (default {FULL.conductors})"
    )
    parser.add_argument("--bots", type=int, help=f"bot processes (default {FULL.bots})")
    parser.add_argument("--seed", type=int, help="random seed, to repeat a sequence of kills")
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    chosen = {k: getattr(args, k) for k in ("runs", "kills", "conductors", "bots")}
    for name, value in chosen.items():
        if value is not None and value < (0 if name == "kills" else 1):
            parser.error(f"--{name}: {value} must be at least {0 if name == 'kills' else 1}")
    sizes = replace(sizes, **{k: v for k, v in chosen.items() if v is not None})
    exit_on_sigterm()
    started = time.perf_counter()
    try:
        with ExitStack() as stack:
            url = stack.enter_context(fresh_database(stack.enter_context(embedded_server())))
            home = Path(tempfile.mkdtemp(prefix="threadline-chaos-"))
            stack.callback(shutil.rmtree, home, ignore_errors=True)
            outcome = run_chaos(
                url, home, sizes, args.seed, progress=lambda t: print(f"  .. {t}", flush=True)
            )
    except KeyboardInterrupt:
        print("chaos: interrupted; every process stopped and the database removed", file=sys.stderr)
        return 130
    print("\n".join(outcome.lines()))
    print(*figure_lines([("wall time", f"{time.perf_counter() - started:.1f} s")]))
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
