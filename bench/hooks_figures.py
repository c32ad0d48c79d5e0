"""The webhook ingress's figures: seconds from sending a signed delivery to its 202, on a new
connection each time and on one kept-alive connection, against a real `threadline hooks` process.

    python -m bench.hooks_figures [--samples N] [--database-url URL]

Nothing here asserts a speed; the medians are printed only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import sys
import time
from pathlib import Path

from bench.database import add_database_option, session
from bench.stats import Summary
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.ingress.webhook_auth import DELIVERY_HEADER, signed_headers
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.store import db
from engine_adapter.testing import harness

SECRET_VAR, SECRET = "TL_BENCH_HOOK_SECRET", "bench-secret"
RECIPE = (
    f"slug: bench-hook\nwebhooks:\n  - path: bench\n    secret: env:{SECRET_VAR}\n"
    "steps:\n  - id: s\n    run_command: echo\n"
)


def deliveries(port: int, samples: int, keep_alive: bool, tag: str) -> Summary:
    """Seconds per signed delivery (each a new run), from sending to reading the 202."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    took = []
    try:
        for i in range(samples):
            if not keep_alive:
                conn.close()
            body = json.dumps({"i": i, "tag": tag}).encode()
            headers = dict(
                signed_headers(SECRET, body),
                **{"Content-Type": "application/json", DELIVERY_HEADER: f"{tag}-{i}"},
            )
            started = time.perf_counter()
            conn.request("POST", "/hooks/bench", body, headers)
            response = conn.getresponse()
            response.read()
            took.append(time.perf_counter() - started)
            if response.status != 202:
                raise RuntimeError(f"delivery {i} answered {response.status}")
    finally:
        conn.close()
    return Summary.of(took)


def measure(url: str, home: Path, samples: int) -> dict[str, Summary]:
    with db.connect(url) as conn:
        apply_recipe(conn, load_recipe_text(RECIPE))
    procs = harness.ProcessSet(url, home)
    try:
        procs.start("hooks", env={SECRET_VAR: SECRET}, args=["--port", "0"])
        log = home / "hooks.log"
        match = harness.wait_for(
            lambda: (
                log.exists()
                and re.search(r"listening on http://\S+?:(\d+)/hooks/", log.read_text())
            ),
            timeout=60,
            what="threadline hooks to listen",
        )
        port = int(match.group(1))
        deliveries(port, 10, True, "warm-up")
        return {
            "new connection": deliveries(port, samples, False, "new"),
            "keep-alive": deliveries(port, samples, True, "kept"),
        }
    finally:
        procs.kill_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    add_database_option(parser)
    args = parser.parse_args(argv)
    with session(args.database_url, "threadline-bench-hooks-") as (url, home):
        figures = measure(url, home, args.samples)
    for name, summary in figures.items():
        print(f"webhook delivery to 202, {name:<15} {summary.fmt(1000, digits=2)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
