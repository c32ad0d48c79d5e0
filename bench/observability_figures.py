"""What watching costs per step: nothing, a Prometheus scraper, a notebook's change feed, traces.

    .venv/bin/python -m bench.observability_figures [--runs 20] [--rounds 3] [--repeats 3]
    .venv/bin/python -m bench.observability_figures --smoke   # one small turn of each

Four settings take turns, in order, `--repeats` times, so a noisy moment of a shared machine hits
all of them; each turn is a fresh conductor and bots process (16 slots) that spawns `--runs` runs
of five `true` steps at once, `--rounds` times, and waits until they complete.

- nothing: no one watches (the console runs in every turn, serving nobody);
- scraper: a process GETs the console's /metrics every SCRAPE_S with a viewer's API token and
  parses it with Prometheus's text parser;
- feed: a process holds what a notebook does, connect() on the viewer login with a runs widget
  and the badge, redrawn from the change feed (bench/observers.py);
- traces: the conductor and the bots send OpenTelemetry spans (the SDK's default batching) to an
  OTLP/HTTP receiver on loopback that decodes every request.

Prints the medians per setting and each one's ratio to nothing: steps per second; CPU ms per step
of Postgres (all of it, background work included), the conductor, the bots, the watchers (the
console and whichever watcher the setting runs) and the whole machine; and counts per step:
commits of the database (spawns included, the benchmark's own polls not), WAL records, and the
watcher's own (scrapes, widget redraws, spans received). Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import cpu
from bench.database import add_database_option, session
from bench.scale_figures import RECIPE, SLUG, STATS_FLUSH_S, STEPS, db_counters
from bench.stats import ratio
from bench.threadline_figures import wait_completed
from engine_adapter.access import authorization
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db, roles
from engine_adapter.testing import harness

Conn = psycopg.Connection[Any]
SETTINGS = ("nothing", "scraper", "feed", "traces")
SLOTS = "16"
SCRAPE_S = 1.0
POLL_S = 0.1  # the benchmark's own polls are one commit each, taken off the counts
WARM_RUNS = 2
CPU_FIGURES = ("postgres (all)", "conductor", "bots", "watchers", "machine")
COUNT_FIGURES = ("commits", "WAL records")


@dataclass(frozen=True)
class Turn:
    steps_per_s: float
    cpu_ms: tuple[float, ...]  # per step, CPU_FIGURES in order
    counts: tuple[float, ...]  # per step, COUNT_FIGURES in order
    events: tuple[str, float]  # the watcher's own count per step of the whole turn


@dataclass(frozen=True)
class Watch:
    """What the turns share: the processes' logins, the console (serving in every turn) and a
    viewer's API token for the scraper."""

    logins: dict[str, str]
    console: subprocess.Popen[bytes]
    base: str
    token: str


def wait_done(conn: Conn, run_ids: list[str], timeout: float) -> int:
    """Until every run completed; the benchmark's polls (one commit each)."""
    return wait_completed(conn, run_ids, timeout, interval=POLL_S)


def start_watcher(home: Path, *args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    with open(home / f"watcher-{args[0]}.log", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "bench.observers", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_watcher(proc: subprocess.Popen[bytes], home: Path, kind: str) -> tuple[str, float]:
    """SIGTERM it; the (event name, count) of its last line (e.g. 'spans 120')."""
    log = home / f"watcher-{kind}.log"
    if proc.poll() is not None:
        raise RuntimeError(f"the {kind} watcher died:\n{log.read_text()}")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    words = log.read_text().split()
    return words[-2], float(words[-1])


def listening(conn: Conn, user: str) -> bool:
    """Whether a backend of `user` has taken up the feed (its last statement a LISTEN)."""
    row = conn.execute(
        "select count(*) as n from pg_stat_activity where usename = %s and query ilike 'listen%%'",
        (user,),
    ).fetchone()
    return bool(row and row["n"])


@contextmanager
def watcher(setting: str, home: Path, watch: Watch, conn: Conn) -> Iterator[dict[str, Any]]:
    """Start the setting's watcher; yield what the turn needs (the processes' env, the
    watcher's process, what waits until it watches), and on the way out its count line in
    out['events']."""
    out: dict[str, Any] = {"env": {}, "proc": None, "events": ("none", 0.0), "ready": None}
    if setting == "scraper":
        out["proc"] = start_watcher(home, "scrape", watch.base, watch.token, str(SCRAPE_S))
    elif setting == "feed":
        out["proc"] = start_watcher(home, "follow", watch.logins["viewer"])
        viewer = str(psycopg.conninfo.conninfo_to_dict(watch.logins["viewer"])["user"])
        out["ready"] = lambda: harness.wait_for(
            lambda: listening(conn, viewer), 60, 0.1, "the notebook's feed to listen"
        )
    elif setting == "traces":
        port_file = home / "otlp.port"
        out["proc"] = start_watcher(home, "otlp", str(port_file))
        harness.wait_for(port_file.exists, 30, 0.05, "the OTLP receiver")
        harness.wait_for(lambda: port_file.read_text(), 5, 0.05, "the OTLP receiver's port")
        endpoint = f"http://127.0.0.1:{port_file.read_text()}"
        out["env"] = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    try:
        yield out
    finally:
        if out["proc"] is not None:
            kind = {"scraper": "scrape", "feed": "follow", "traces": "otlp"}[setting]
            out["events"] = stop_watcher(out["proc"], home, kind)


def readings(conn: Conn, pids: dict[str, list[int]]) -> list[float]:
    """CPU seconds so far (CPU_FIGURES in order), then the counters (COUNT_FIGURES)."""
    time.sleep(STATS_FLUSH_S)  # busy backends report their counts about once a second
    conn.execute("select pg_stat_clear_snapshot()")
    commits, wal = db_counters(conn)
    server = cpu.server_cpu_s(conn) or 0.0
    own = {k: sum(cpu.own_and_children_s(p)[0] for p in ps) for k, ps in pids.items()}
    machine = cpu.machine_busy_s()
    return [server, own["conductor"], own["bots"], own["watchers"], machine, commits, wal]


def turn(
    conn: Conn, url: str, home: Path, watch: Watch, setting: str, runs: int, rounds: int
) -> Turn:
    home.mkdir(parents=True)
    procs = harness.ProcessSet(url, home, logins=watch.logins)
    try:
        with watcher(setting, home, watch, conn) as w:
            conductor = procs.start("conductor", env=w["env"])
            bots = procs.start("bots", env=w["env"], args=["--concurrency", SLOTS])
            procs.wait_started(conductor, "conductor")  # all three start at once
            procs.wait_started(bots, "bots")
            if w["ready"] is not None:
                w["ready"]()
            wait_done(conn, [spawn(conn, SLUG).run_id for _ in range(WARM_RUNS)], 120)
            watchers = [watch.console.pid] + ([w["proc"].pid] if w["proc"] else [])
            pids = {"conductor": [conductor.pid], "bots": [bots.pid], "watchers": watchers}
            before = readings(conn, pids)
            started, polls = time.monotonic(), 0
            for _ in range(rounds):
                polls += wait_done(conn, [spawn(conn, SLUG).run_id for _ in range(runs)], 600)
            elapsed = time.monotonic() - started
            after = readings(conn, pids)
            if setting == "traces":  # stopped, not killed: they send the spans they hold
                for proc in (bots, conductor):
                    harness.kill(proc, signal.SIGTERM)
    except Exception:
        print("benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
        raise
    finally:
        procs.kill_all()
    steps = runs * rounds * STEPS
    delta = [b - a for a, b in zip(before, after, strict=True)]
    delta[5] -= polls + 2  # the benchmark's polls, and its two stats snapshots' commits
    name, count = w["events"]
    return Turn(
        steps / elapsed,
        tuple(v * 1000 / steps for v in delta[:5]),
        tuple(v / steps for v in delta[5:]),
        (name, count / ((runs * rounds + WARM_RUNS) * STEPS)),
    )


def mint_token(url: str, home: Path) -> str:
    """A viewer's API token for an account 'prometheus', minted by the CLI as an operator would."""
    for args in (("user", "add", "prometheus"), ("token", "create", "prometheus", "--role=viewer")):
        done = harness.run_cli(url, *args, home=home)
        if done.returncode != 0:
            raise RuntimeError(f"`threadline {' '.join(args)}` failed: {done.stderr}")
    return done.stdout.strip()


def measure(url: str, home: Path, runs: int, rounds: int, repeats: int) -> dict[str, list[Turn]]:
    turns: dict[str, list[Turn]] = {s: [] for s in SETTINGS}
    with db.connect(url) as conn:
        authorization.sync_rules(conn)
        logins = roles.grant_logins(conn)  # each process connects as its kind's role, as under up
        procs = harness.ProcessSet(url, home / "console", logins=logins)
        try:
            apply_recipe(conn, load_recipe_text(RECIPE))
            port, begun = harness.free_port(), time.monotonic()
            console = procs.start("console", args=["--port", str(port)])
            base = f"http://127.0.0.1:{port}"
            harness.wait_for(
                lambda: harness.answers(base + "/api/v1/openapi.json"), 120, 0.3, "the console"
            )
            watch = Watch(logins, console, base, mint_token(url, procs.threadline_home))
            print(f"  .. console serving after {time.monotonic() - begun:.0f} s", flush=True)
            for i in range(repeats):
                for setting in SETTINGS:
                    begun = time.monotonic()
                    t = turn(conn, url, home / f"{setting}-{i}", watch, setting, runs, rounds)
                    turns[setting].append(t)
                    print(
                        f"  .. {setting} turn {i + 1}: {t.steps_per_s:.1f} steps/s"
                        f" ({time.monotonic() - begun:.0f} s in all)",
                        flush=True,
                    )
        except Exception:
            print("benchmark failed; console log:\n" + procs.log_tails(), file=sys.stderr)
            raise
        finally:
            procs.kill_all()
            roles.drop_logins(conn)
    return turns


def table(turns: dict[str, list[Turn]], runs: int, rounds: int) -> list[str]:
    repeats = len(turns[SETTINGS[0]])
    out = [
        f"{runs} runs of {STEPS} `true` steps at once, {rounds} batch(es) a turn, "
        f"{repeats} turn(s) of each setting taking turns; medians, and (ratio to nothing)",
        f"scraper: GET /metrics every {SCRAPE_S:g} s; feed: a notebook's runs widget and badge; "
        "traces: OTLP/HTTP on loopback, default batching",
        f"{'':<26}" + "".join(f"{s:>16}" for s in SETTINGS),
    ]

    def row(label: str, values: dict[str, float], digits: int = 2) -> str:
        base = values["nothing"]
        cells = "".join(
            f"{f'{values[s]:.{digits}f} ({ratio(values[s], base)})':>16}" for s in SETTINGS
        )
        return f"{label:<26}{cells}"

    def med(fn: Any) -> dict[str, float]:
        return {s: statistics.median(fn(t) for t in turns[s]) for s in SETTINGS}

    out.append(row("steps/s", med(lambda t: t.steps_per_s), 1))
    for i, figure in enumerate(CPU_FIGURES):
        out.append(row(f"CPU ms/step {figure}", med(lambda t, i=i: t.cpu_ms[i])))
    for i, figure in enumerate(COUNT_FIGURES):
        out.append(row(f"{figure}/step", med(lambda t, i=i: t.counts[i])))
    events = [
        f"{turns[s][0].events[0]} {statistics.median(t.events[1] for t in turns[s]):.2f}"
        for s in SETTINGS[1:]
    ]
    out.append(f"{'watcher events/step':<26}{'':>16}" + "".join(f"{e:>16}" for e in events))
    out.append(
        "CPU times are of a shared, noisy machine and move between turns; the counts (commits, "
        "WAL records, events) are steady. watchers = the console (serving in every setting) and "
        "the setting's watcher process."
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs spawned at once (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="batches per turn (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="turns of each (default 3)")
    parser.add_argument("--smoke", action="store_true", help="one turn of each, 10 runs")
    add_database_option(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.rounds, args.repeats = 10, 1, 1
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{os.cpu_count()} CPUs, {when}", flush=True)
    with session(args.database_url, "threadline-bench-observe-") as (url, home):
        turns = measure(url, home, args.runs, args.rounds, args.repeats)
    print("\n".join(table(turns, args.runs, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
