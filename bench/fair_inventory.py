"""Where a workflow's commits and WAL records go: Threadline's turn of bench/fair_figures.py on a
private embedded server that logs every statement and can read its own WAL.

    .venv/bin/python -m bench.fair_inventory [--runs 50] [--top 60]

N workflows of three `true` steps are spawned at once, as in the fair baseline. Printed per
workflow: the commits and WAL records (as fair_figures counts them); the transactions each
process sent, by statement (log_statement = all, counted as bench/step_trace.py counts them: a
BEGIN..COMMIT, or a statement on its own); and the WAL records by relation and record type
(pg_walinspect over the turn's stretch of WAL). The commits no process sent are the listening
backends' reads of the notifications (docs/speed.md). Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from bench import fair_figures as fair
from bench import step_trace
from bench.database import fresh_database
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.store.embedded import EmbeddedPostgres
from engine_adapter.testing import harness

WAL_BY_RELATION = """
select coalesce(c.relname, 'file ' || b.relfilenode::text) as rel,
       b.resource_manager || ' ' || b.record_type as kind, count(distinct b.start_lsn) as records
  from pg_get_wal_block_info(%s::pg_lsn, %s::pg_lsn) b
  left join pg_class c on c.relfilenode = b.relfilenode
 group by 1, 2 order by 3 desc limit %s
"""


class MarkedMeter(fair.Meter):
    """fair.Meter noting where the server's log and WAL stood at each reading of the counts."""

    def __init__(self, url: str, log_file: Path, marks: list[tuple[int, str]]) -> None:
        super().__init__(url)
        self.log_file, self.marks = log_file, marks

    def counters(self) -> tuple[int, int]:
        lsn = self.conn.execute("select pg_current_wal_insert_lsn()::text as l").fetchone()
        assert lsn is not None
        self.marks.append((self.log_file.stat().st_size, str(lsn["l"])))
        return super().counters()


def measure(runs: int, top: int) -> list[str]:
    server_home = Path(tempfile.mkdtemp(prefix="threadline-bench-inventory-"))
    marks: list[tuple[int, str]] = []
    with harness.throwaway_server(home=server_home) as admin:
        log_file = EmbeddedPostgres(server_home).log_file
        with fresh_database(admin) as url, tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            harness.make_traversable(home)
            with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as c:
                c.execute("create extension if not exists pg_walinspect")
                apply_recipe(c, load_recipe_text(fair.recipe_text()))
            step_trace.configure_logging(admin)
            turn = fair.turn(
                url,
                "threadline",
                runs,
                fair.DEFAULT_CONCURRENCY,
                home,
                lambda u: MarkedMeter(u, log_file, marks),
            )
            (log_start, wal_start), (log_end, wal_end) = marks[0], marks[-1]
            with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as c:
                wal = c.execute(WAL_BY_RELATION, (wal_start, wal_end, top)).fetchall()
        with open(log_file, "rb") as f:
            f.seek(log_start)
            text = f.read(log_end - log_start).decode(errors="replace")
    return report(turn, step_trace.tally(text), wal, runs, top)


def report(
    turn: fair.Turn,
    tallies: dict[str, step_trace.Tally],
    wal: list[dict[str, Any]],
    runs: int,
    top: int,
) -> list[str]:
    out = [
        f"{runs} workflows of 3 `true` steps at once: {turn.commits:.1f} commits and"
        f" {turn.wal_records:.0f} WAL records per workflow",
        "transactions sent per workflow, by process ([unknown]: the benchmark: spawns, polling):",
    ]
    for app, t in sorted(tallies.items()):
        out.append(f"  {app:<24} {t.transactions / runs:6.2f}")
        out += [
            f"    {n / runs:5.2f}  {sql}" for sql, n in t.shapes.most_common(top) if n >= runs / 20
        ]
    sent = sum(t.transactions for t in tallies.values()) / runs
    out.append(
        f"  {'all':<24} {sent:6.2f}  (the rest of the commits: listeners' reads, background)"
    )
    out.append("WAL records per workflow, by relation and record type:")
    out += [f"  {r['records'] / runs:6.1f}  {r['kind']:<28} {r['rel']}" for r in wal]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="workflows (default 50)")
    parser.add_argument("--top", type=int, default=60, help="rows of each list (default 60)")
    args = parser.parse_args(argv)
    print("\n".join(measure(args.runs, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
