"""Scale-out: one conductor and one bots process against two of each, every pair in a network
namespace of its own (as on a machine of its own), talking to Postgres over a virtual link.

    .venv/bin/python -m bench.scaleout_figures [--runs 200] [--repeats 3]

Each namespace gets a veth pair to the Postgres host (10.231.N.2 -> 10.231.N.1), so its processes
reach the database only through that link, never through a shared loopback; the embedded server
listens on the host side of every link and accepts password logins from there. N runs of three
steps (`true`, or --command) are spawned at once; throughput is runs per second from the first
spawn to the last run's end, on the database clock. The two sizes alternate, so a noisy moment
hits both. Needs root and iproute2 (`ip netns`); says why it is skipped otherwise. Everything it
creates is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.database import fresh_database
from bench.threadline_figures import wait_completed
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.store.embedded import EmbeddedPostgres
from engine_adapter.store.roles import url_with
from engine_adapter.testing import harness

SLUG = "bench-scaleout"


def recipe(command: str) -> str:
    return f"slug: {SLUG}\nsteps:\n" + "".join(
        f"  - {{id: s{i}, run_command: {json.dumps(command)}}}\n" for i in range(1, 4)
    )


SUBNET = "10.231"
BOT_SLOTS = 8


def skipped() -> str | None:
    if os.geteuid() != 0:
        return "skipped: network namespaces need root"
    if shutil.which("ip") is None:
        return "skipped: no `ip` command (iproute2)"
    return None


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextmanager
def namespaces(count: int) -> Iterator[list[tuple[str, str]]]:
    """`count` network namespaces, each linked to this one by a veth pair: [(name, host address
    of its link)]. Removed on the way out (a namespace takes its veth pair with it)."""
    tag = uuid.uuid4().hex[:6]
    made: list[tuple[str, str]] = []
    try:
        for n in range(1, count + 1):
            name, host_if, ns_if = f"tl-{tag}-{n}", f"tl{tag}h{n}", f"tl{tag}n{n}"
            host_ip, ns_ip = f"{SUBNET}.{n}.1", f"{SUBNET}.{n}.2"
            ip("netns", "add", name)
            made.append((name, host_ip))
            ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
            ip("link", "set", ns_if, "netns", name)
            ip("addr", "add", f"{host_ip}/30", "dev", host_if)
            ip("link", "set", host_if, "up")
            ip("-n", name, "addr", "add", f"{ns_ip}/30", "dev", ns_if)
            ip("-n", name, "link", "set", ns_if, "up")
            ip("-n", name, "link", "set", "lo", "up")
        yield made
    finally:
        for name, _ in made:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


@contextmanager
def linked_server(host_ips: list[str]) -> Iterator[str]:
    """A throwaway embedded Postgres listening on loopback and on the host side of every link,
    accepting password logins from the links; yields its admin URL (on loopback)."""
    home = Path(tempfile.mkdtemp(prefix="threadline-bench-scaleout-pg-"))
    server = EmbeddedPostgres(home, listen_addresses=",".join(["127.0.0.1", *host_ips]))
    try:
        server.ensure_initialised()
        url = server.start()
        hba = server.data_dir / "pg_hba.conf"
        with open(hba, "a") as f:
            f.write(f"host all all {SUBNET}.0.0/16 scram-sha-256\n")
        with db.connect(url) as conn:
            conn.execute("select pg_reload_conf()")
        yield url
    finally:
        harness.remove_server(home)


def throughput(url: str, runs: int, timeout: float) -> float:
    """Runs per second for `runs` runs spawned at once, on the database clock."""
    with db.connect(url) as conn:
        run_ids = [spawn(conn, SLUG).run_id for _ in range(runs)]
        wait_completed(conn, run_ids, timeout)
        row = conn.execute(
            "select extract(epoch from max(finished_at) - min(created_at))::float8 as s"
            "  from threadline.run_threads where run_id = any(%s::uuid[])",
            (run_ids,),
        ).fetchone()
    return runs / row["s"]


def measure(runs: int, repeats: int, timeout: float, command: str) -> dict[int, list[float]]:
    """Throughput samples by the number of namespaces (each with a conductor and a bots
    process)."""
    samples: dict[int, list[float]] = {1: [], 2: []}
    with ExitStack() as stack:
        links = stack.enter_context(namespaces(2))
        admin = stack.enter_context(linked_server([host_ip for _, host_ip in links]))
        url = stack.enter_context(fresh_database(admin))
        home = Path(tempfile.mkdtemp(prefix="threadline-bench-scaleout-"))
        stack.callback(shutil.rmtree, home, ignore_errors=True)
        with db.connect(url) as conn:
            apply_recipe(conn, load_recipe_text(recipe(command)))
        crews = []
        for name, host_ip in links:
            crew = harness.ProcessSet(
                url_with(url, host=host_ip), home / name, prefix=("ip", "netns", "exec", name)
            )
            stack.callback(crew.kill_all)
            crews.append(crew)
        for _ in range(repeats):
            for size in (1, 2):
                started = []
                for crew in crews[:size]:
                    started.append(crew.start("conductor", wait=True))
                    started.append(
                        crew.start("bots", args=["--concurrency", str(BOT_SLOTS)], wait=True)
                    )
                try:
                    throughput(url, max(4, runs // 20), timeout)  # warm-up: connections, caches
                    samples[size].append(throughput(url, runs, timeout))
                except Exception:
                    print("benchmark failed; logs:\n" + crews[0].log_tails(), file=sys.stderr)
                    raise
                finally:
                    for proc in started:
                        harness.kill(proc)
                    time.sleep(0.5)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs spawned at once (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="samples of each size (default 3)")
    parser.add_argument(
        "--command",
        default="true",
        help="each step's command (default true: CPU-bound; e.g. 'sleep 0.2' for bound by slots)",
    )
    args = parser.parse_args(argv)
    reason = skipped()
    if reason:
        print(f"scale-out: {reason}")
        return 0
    samples = measure(args.runs, args.repeats, timeout=600, command=args.command)
    one, two = statistics.median(samples[1]), statistics.median(samples[2])
    print(
        f"scale-out, {args.runs} runs of 3 `{args.command}` steps, {BOT_SLOTS} bot slots a pair,"
        " each pair in a network namespace of its own:"
    )
    for size, label in ((1, "1 conductor + 1 bots process"), (2, "2 conductors + 2 bots")):
        shown = ", ".join(f"{s:.1f}" for s in samples[size])
        print(f"  {label:<29}: {statistics.median(samples[size]):6.1f} runs/s  ({shown})")
    print(f"  2 / 1: {two / one:.2f}  (cores here: {os.cpu_count()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
