"""Per step: the transactions and statements each process sends to Postgres, and which.

    .venv/bin/python -m bench.step_trace [--runs 10] [--top 40]

A private embedded Postgres logs every statement (`log_statement = all`, each line prefixed with
the backend's pid and application name: every Threadline process names itself). After a warm-up,
`--runs` runs of five `true` steps go one after another through one conductor and one bots
process; the log of that stretch is cut out and counted: a transaction is BEGIN..COMMIT on one
backend, or a statement sent outside one. Statements inside SQL functions are not round trips and
are not counted. Background work (heartbeats, timers) falls in the stretch too and is counted with
the rest: it is part of what a step costs. Prints totals per step, the statements by kind, and
where the database's execution time went (pg_stat_statements, loaded for the run).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.database import fresh_database
from bench.threadline_figures import wait_completed
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.store.embedded import EmbeddedPostgres
from engine_adapter.testing import harness

Conn = psycopg.Connection[Any]
SLUG = "bench-trace"
STEPS = 5
RECIPE = f"slug: {SLUG}\nsteps:\n" + "".join(
    f'  - {{id: s{i}, run_command: "true"}}\n' for i in range(1, STEPS + 1)
)
PREFIX = "%m|%p|%a|"
LINE = re.compile(r"^\S+ \S+ \S+\|(?P<pid>\d+)\|(?P<app>[^|]*)\|(?P<level>\w+):\s+(?P<rest>.*)$")
STATEMENT = re.compile(r"^(?:statement|execute [^:]*): (?P<sql>.*)$", re.S)
BENCH_APP = "bench"


@dataclass
class Tally:
    """One process kind's transactions and statements, and the statements by their shape."""

    transactions: int = 0
    statements: int = 0
    shapes: Counter[str] = field(default_factory=Counter)


def shape(sql: str) -> str:
    """A statement's kind for the table: its first words, whitespace folded, values dropped."""
    text = " ".join(sql.split())
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\$\d+", "$n", text)
    return text[:90]


def statements(log_text: str) -> list[tuple[str, str, str]]:
    """(pid, application, SQL) of each logged statement, continuation lines joined."""
    out: list[tuple[str, str, str]] = []
    current: list[Any] | None = None
    for line in log_text.splitlines():
        match = LINE.match(line)
        if match is None:
            if current is not None and line.startswith(("\t", " ")):
                current[2] += " " + line.strip()
            continue
        current = None
        if match["level"] != "LOG":
            continue
        stmt = STATEMENT.match(match["rest"])
        if stmt is None:
            continue
        current = [match["pid"], match["app"], stmt["sql"]]
        out.append(current)  # type: ignore[arg-type]
    return [(pid, app, sql) for pid, app, sql in out]


def tally(log_text: str) -> dict[str, Tally]:
    """Per application name: transactions, statements, shapes. BEGIN/COMMIT are not statements."""
    by_app: dict[str, Tally] = {}
    open_txn: set[str] = set()
    for pid, app, sql in statements(log_text):
        if app == BENCH_APP:
            continue
        t = by_app.setdefault(app or "(unnamed)", Tally())
        word = sql.strip().split(None, 1)[0].lower().rstrip(";") if sql.strip() else ""
        if word == "begin":
            open_txn.add(pid)
            t.transactions += 1
            continue
        if word in ("commit", "rollback"):
            open_txn.discard(pid)
            continue
        if pid not in open_txn:
            t.transactions += 1
        t.statements += 1
        t.shapes[shape(sql)] += 1
    return by_app


def configure_logging(admin_url: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("alter system set log_statement = 'all'")
        admin.execute(f"alter system set log_line_prefix = '{PREFIX}'")
        admin.execute("select pg_reload_conf()")


def with_statement_statistics(server_home: Path, admin_url: str) -> str:
    """Restart the server with pg_stat_statements loaded (statements inside functions too);
    returns its URL."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("alter system set shared_preload_libraries = 'pg_stat_statements'")
        admin.execute("alter system set pg_stat_statements.track = 'all'")
    server = EmbeddedPostgres(server_home)
    server.stop()
    return server.start()


@dataclass(frozen=True)
class Timed:
    """One statement's share of the database's time: executions and milliseconds per step."""

    calls: float
    ms: float
    nested: bool  # run inside a function, not sent by a client
    sql: str


def statement_times(conn: Conn, steps: int, top: int) -> list[Timed]:
    rows = conn.execute(
        "select query, calls, total_exec_time, toplevel from pg_stat_statements"
        " where dbid = (select oid from pg_database where datname = current_database())"
        " order by total_exec_time desc limit %s",
        (top,),
    ).fetchall()
    return [
        Timed(r["calls"] / steps, r["total_exec_time"] / steps, not r["toplevel"], shape(q))
        for r in rows
        for q in [r["query"]]
    ]


def trace(
    server_home: Path, admin_url: str, runs: int, top: int
) -> tuple[dict[str, Tally], list[Timed], int]:
    """Run `runs` runs one at a time with statement logging on: the tallies, the statements
    that took the database's time, and the step count."""
    log_file = EmbeddedPostgres(server_home).log_file
    with fresh_database(admin_url) as url, tempfile.TemporaryDirectory() as tmp:
        with db.connect(url) as conn:
            conn.execute(f"set application_name = {BENCH_APP}")
            apply_recipe(conn, load_recipe_text(RECIPE))
            procs = harness.ProcessSet(url, Path(tmp))
            try:
                procs.start("conductor", wait=True)
                procs.start("bots", wait=True)
                wait_completed(conn, [spawn(conn, SLUG).run_id for _ in range(2)], 60)  # warm-up
                conn.execute("create extension if not exists pg_stat_statements")
                configure_logging(admin_url)
                start = log_file.stat().st_size
                conn.execute("select pg_stat_statements_reset()")
                for _ in range(runs):
                    wait_completed(conn, [spawn(conn, SLUG).run_id], 60)
                end = log_file.stat().st_size
                timed = statement_times(conn, runs * STEPS, top)
            except Exception:
                print("benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
                raise
            finally:
                procs.kill_all()
    with open(log_file, "rb") as f:
        f.seek(start)
        text = f.read(end - start).decode(errors="replace")
    return tally(text), timed, runs * STEPS


def measure(runs: int, top: int) -> tuple[dict[str, Tally], list[Timed], int]:
    """trace() on a private embedded server of its own (it is restarted and logs everything)."""
    server_home = Path(tempfile.mkdtemp(prefix="threadline-bench-trace-"))
    with harness.throwaway_server(home=server_home) as admin_url:
        admin_url = with_statement_statistics(server_home, admin_url)
        return trace(server_home, admin_url, runs, top)


def report(tallies: dict[str, Tally], timed: list[Timed], steps: int, top: int) -> list[str]:
    out = [f"per step ({steps} steps of `true`, runs one at a time; spawn and finish included):"]
    for app, t in sorted(tallies.items()):
        out.append(
            f"  {app:<22} {t.transactions / steps:6.1f} transactions  "
            f"{t.statements / steps:6.1f} statements"
        )
    total_t = sum(t.transactions for t in tallies.values())
    total_s = sum(t.statements for t in tallies.values())
    out.append(
        f"  {'all':<22} {total_t / steps:6.1f} transactions  {total_s / steps:6.1f} statements"
    )
    for app, t in sorted(tallies.items()):
        out.append(f"\n{app}: statements per step, most frequent first")
        for sql, n in t.shapes.most_common(top):
            out.append(f"  {n / steps:5.2f}  {sql}")
    total = sum(t.ms for t in timed if not t.nested)
    out.append(
        f"\nthe database's execution time per step: {total:.2f} ms in statements sent by clients;"
        " the costliest (nested: run inside a function, its time also in its caller's):"
    )
    for t in timed:
        where = "nested" if t.nested else "sent  "
        out.append(f"  {t.ms:6.3f} ms  {t.calls:5.2f} calls  {where}  {t.sql}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of five steps (default 10)")
    parser.add_argument("--top", type=int, default=40, help="statement kinds shown per process")
    args = parser.parse_args(argv)
    tallies, timed, steps = measure(args.runs, args.top)
    print("\n".join(report(tallies, timed, steps, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
