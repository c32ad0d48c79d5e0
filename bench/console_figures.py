"""The console's figures: a change in Postgres until it is visible in the page (headless Chromium),
and the runs page's server-side queries over a large seeded history.

    .venv/bin/python -m bench.console_figures [--runs 1000000] [--repeats 10]

runs the second alone, at any size (`bench/run.py` runs both, at 100,000 runs).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg

from bench.database import add_database_option, session
from bench.seed import seed_runs
from bench.stats import Summary
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.read import run_list
from engine_adapter.read.run_list import Cursor, RunFilters
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs import run_state, thread_entries
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

CHROMIUM = "/usr/bin/chromium"
RECIPE = "slug: bench-console\nbot: local\nsteps:\n  - id: ask\n    human_gate: watch me\n"
Conn = psycopg.Connection[Any]


def change_to_page(procs: harness.ProcessSet, conn: Conn, samples: int) -> dict[str, Summary] | str:
    """Seconds from a committed change (a thread entry; a run state) to the page showing it."""
    if shutil.which(CHROMIUM) is None:
        return f"skipped: no Chromium at {CHROMIUM}"
    from playwright.sync_api import sync_playwright

    apply_recipe(conn, load_recipe_text(RECIPE))
    run_id = spawn(conn, "bench-console", {}).run_id  # no conductor: the page watches a still run
    port = harness.free_port()
    procs.start("console", args=["--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    harness.wait_for(
        lambda: harness.answers(base + "/recipes"), timeout=90, interval=0.3, what="the console"
    )
    entry, state = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page()
        link = harness.run_cli(
            procs.url, "console", "link", "--port", str(port), home=procs.threadline_home
        )
        if link.returncode != 0:
            raise RuntimeError(f"cannot mint a console sign-in link: {link.stderr}")
        page.goto(link.stdout.strip())  # signs in: the token becomes a session cookie
        page.goto(f"{base}/run?id={run_id}")
        page.wait_for_selector("#tl-run-state")
        for i in range(samples):
            with conn.transaction():
                seq = thread_entries.append(
                    conn, run_id, "system", "threadline", "note", f"bench entry {i}"
                )
            entry.append(_until_visible(page, f".tl-entry[data-seq='{seq}']"))
            target = "sleeping" if i % 2 == 0 else "pending"
            with conn.transaction():
                run_state.set_run_state(conn, run_id, target, None, None)
            state.append(_until_visible(page, f"#tl-run-state:text-is('{target}')"))
        browser.close()
    return {"entry": Summary.of(entry), "state": Summary.of(state)}


def _until_visible(page: Any, selector: str) -> float:
    """Seconds from now (just after the commit) until the selector matches in the page."""
    started = time.perf_counter()
    page.wait_for_selector(selector, timeout=30_000)
    return time.perf_counter() - started


def list_queries(conn: Conn, runs: int, repeats: int) -> tuple[float, dict[str, Summary]]:
    """Seed `runs` runs, then time each query the runs page makes."""
    seed_s = seed_runs(conn, runs)
    deep_rows = conn.execute(
        "select created_at, run_id from threadline.run_threads "
        "order by created_at desc, run_id desc offset %s limit 1",
        (runs // 2,),
    ).fetchone()
    deep = Cursor(deep_rows["created_at"], str(deep_rows["run_id"]))
    cases: dict[str, Callable[[], object]] = {
        "first page": lambda: run_list.runs_page(conn, RunFilters()),
        f"page at run {runs // 2:,} (keyset)": lambda: run_list.runs_page(conn, RunFilters(), deep),
        "state=failed": lambda: run_list.runs_page(conn, RunFilters(state="failed")),
        "workflow + trigger": lambda: run_list.runs_page(
            conn, RunFilters(workflow="seed-3", trigger="webhook")
        ),
        "search in payload (rare)": lambda: run_list.runs_page(conn, RunFilters(search='"T-7919"')),
        "counts by state": lambda: run_list.state_counts(conn, RunFilters()),
        "charts (7 days)": lambda: run_list.chart_data(conn, RunFilters()),
        "whole first load (page, counts, charts)": lambda: (
            run_list.runs_page(conn, RunFilters()),
            run_list.state_counts(conn, RunFilters()),
            run_list.chart_data(conn, RunFilters()),
        ),
    }
    out = {}
    for name, fn in cases.items():
        fn()  # warm
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        out[name] = Summary.of(times)
    return seed_s, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The runs page's queries over a seeded history")
    parser.add_argument("--runs", type=int, default=1_000_000, help="runs to seed (default 1M)")
    parser.add_argument("--repeats", type=int, default=10, help="timings per query (default 10)")
    add_database_option(parser)
    args = parser.parse_args(argv)
    with session(args.database_url, "threadline-bench-console-") as (url, _home):
        with db.connect(url) as conn:
            seed_s, figures = list_queries(conn, args.runs, args.repeats)
    print(f"seed {args.runs:,} runs (set-based SQL): {seed_s:.1f} s")
    for name, summary in figures.items():
        print(f"runs page, {args.runs:,} runs: {name:<40} {summary.fmt(1000)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
