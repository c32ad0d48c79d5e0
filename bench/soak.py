"""Soak: many runs through two conductors and two bot processes under random SIGKILLs, with the
cleanup job running alongside, and every process's memory sampled.

    python bench/soak.py [--runs 10000] [--kills 200] [--in-flight 40] [--seed N]

The chaos benchmark (chaos.py) at length: runs are spawned while fewer than `--in-flight` are
unfinished, so the load stays steady; every few seconds aged finished runs (backdated 400 days)
of the same workflow are written and `threadline cleanup`'s job runs, so the cleanup deletes
while runs are in flight, and must delete only those. The resident memory of each conductor and
bots process is read from /proc every few seconds; a process that lived through most of the soak
shows whether its memory stays flat: the first conductor and the first bots process are never
killed. Exits 1 on anything chaos.py exits 1 for, and when an aged run outlives the last cleanup.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chaos import KINDS, SLUG, ChaosSizes, Crew, exit_on_sigterm, run_chaos
from bench.chaos_report import QUERIES, figure_lines
from bench.database import embedded_server, fresh_database
from engine_adapter.runs import retention
from engine_adapter.store import db

SOAK = ChaosSizes(
    runs=10_000,
    kills=200,
    conductors=2,
    bots=2,
    bot_concurrency=4,
    kill_every_s=0.0,  # the kills follow the spawns, paced by the runs in flight
    timeout_s=300.0,
    max_in_flight=40,
)
CLEANUP_EVERY_S = 5.0
AGED_PER_PASS = 20
SAMPLE_EVERY_S = 5.0
WARM_UP_S = 30.0  # memory is compared from here on: imports, caches and pools are settled


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@dataclass
class Findings:
    passes: int = 0  # cleanup passes that ran (others found the job running elsewhere)
    aged_written: int = 0
    aged_removed: int = 0
    aged_left: int = 0
    errors: list[str] = field(default_factory=list)
    memory: dict[int, tuple[str, list[tuple[float, float]]]] = field(default_factory=dict)

    def growth(self, min_span_s: float) -> dict[str, list[tuple[float, float]]]:
        """Per kind, each long-lived process's RSS in MB after the warm-up and at its end."""
        out: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
        for kind, samples in self.memory.values():
            settled = [(t, mb) for t, mb in samples if t - samples[0][0] >= WARM_UP_S]
            if settled and settled[-1][0] - settled[0][0] >= min_span_s:
                out[kind].append((settled[0][1], settled[-1][1]))
        return out


class Alongside:
    """The soak's companion to the chaos: the cleanup job and the memory samples."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.findings = Findings()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.crew: Crew | None = None
        self.started = time.monotonic()

    def start(self, crew: Crew) -> None:
        # The first process of each kind is never killed: a witness whose memory over the whole
        # soak, while the others die and return around it, shows whether memory stays flat.
        crew.spared = {crew.members[kind][0] for kind in KINDS}
        self.crew = crew
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self.loop, name="soak", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
        with db.connect(self.url) as conn:  # a last pass: nothing aged may be left
            self.clean(conn, write=False)
            self.findings.aged_left = db_count(conn, "soak_aged_left")

    def loop(self) -> None:
        next_clean = next_sample = 0.0
        with db.connect(self.url) as conn:
            while not self.stopping.wait(0.5):
                now = time.monotonic()
                if now >= next_sample:
                    next_sample = now + SAMPLE_EVERY_S
                    self.sample(now - self.started)
                if now >= next_clean:
                    next_clean = now + CLEANUP_EVERY_S
                    self.clean(conn, write=True)

    def sample(self, at: float) -> None:
        assert self.crew is not None
        for kind in KINDS:
            for proc in list(self.crew.members[kind]):
                mb = rss_mb(proc.pid)
                if mb is not None and proc.poll() is None:
                    self.findings.memory.setdefault(proc.pid, (kind, []))[1].append((at, mb))

    def clean(self, conn: psycopg.Connection[Any], write: bool) -> None:
        try:
            if write:
                with conn.transaction():
                    conn.execute(QUERIES["soak_aged_runs"], {"slug": SLUG, "runs": AGED_PER_PASS})
                self.findings.aged_written += AGED_PER_PASS
            report = retention.cleanup(conn, "soak")
            if report is not None:
                self.findings.passes += 1
                self.findings.aged_removed += report.runs
        except Exception as err:  # reported, and the soak fails on it
            self.findings.errors.append(f"{type(err).__name__}: {err}")


def db_count(conn: psycopg.Connection[Any], query: str) -> int:
    return int(conn.execute(QUERIES[query], {"slug": SLUG}).fetchone()["runs"])


def memory_lines(findings: Findings, span_s: float) -> list[tuple[str, str]]:
    lines = []
    for kind, spans in findings.growth(min_span_s=span_s / 2).items():
        if not spans:
            lines.append((f"memory, {kind}", "no process lived through half the soak"))
            continue
        growths = [end - start for start, end in spans]
        shown = ", ".join(f"{start:.0f} -> {end:.0f} MB" for start, end in spans)
        lines.append(
            (
                f"memory, {kind}",
                f"{len(spans)} process(es) through half the soak or more, RSS after "
                f"{WARM_UP_S:.0f} s -> at the end: {shown} (growth median "
                f"{statistics.median(growths):+.1f} MB)",
            )
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=SOAK.runs)
    parser.add_argument("--kills", type=int, default=SOAK.kills)
    parser.add_argument("--in-flight", type=int, default=SOAK.max_in_flight)
    parser.add_argument("--seed", type=int, help="random seed, to repeat a sequence of kills")
    args = parser.parse_args(argv)
    for name in ("runs", "kills", "in_flight"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1")
    sizes = replace(SOAK, runs=args.runs, kills=args.kills, max_in_flight=args.in_flight)
    exit_on_sigterm()
    started = time.perf_counter()
    with ExitStack() as stack:
        url = stack.enter_context(fresh_database(stack.enter_context(embedded_server())))
        home = Path(tempfile.mkdtemp(prefix="threadline-soak-"))
        stack.callback(shutil.rmtree, home, ignore_errors=True)
        alongside = Alongside(url)
        outcome = run_chaos(
            url,
            home,
            sizes,
            args.seed,
            progress=lambda t: print(f"  .. {t}", flush=True),
            companion=alongside,
        )
    span_s = time.perf_counter() - started
    f = alongside.findings
    print("\n".join(outcome.lines()))
    cleanup = (
        f"{f.passes} passes alongside; {f.aged_removed} of {f.aged_written} aged runs removed, "
        f"{f.aged_left} left after the last; errors {len(f.errors)}"
    )
    print(*figure_lines([("cleanup", cleanup), *memory_lines(f, span_s)]), sep="\n")
    print(*figure_lines([("wall time", f"{span_s:.1f} s")]))
    for error in f.errors[:5]:
        print(f"cleanup error: {error}", file=sys.stderr)
    return 0 if outcome.ok and not f.aged_left and not f.errors else 1


if __name__ == "__main__":
    sys.exit(main())
