"""What starting a step's command costs: bare, through setpriv (the step user and the death
signal) and inside bubblewrap, the way a bot starts it; a shell line (`bash -c true`), and a plain
program started through bash and without it (engine_adapter/sandbox/plain_command.py).

    .venv/bin/python -m bench.sandbox_figures [--n 200]

Prints, for each, the median and p90 of the start's wall time, its ratio to the bare shell line,
and the CPU the whole machine spent per start (from /proc/stat: namespaces and mounts are set up
and torn down partly outside the started processes, where their own CPU times miss it; on a
shared machine, others' work adds noise).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.cpu import machine_busy_s
from engine_adapter.sandbox.sandbox import Sandbox, detect

COMMANDS = [
    ("bash -c true", ["bash", "-c", "true"]),
    ("bash -c /usr/bin/true", ["bash", "-c", "/usr/bin/true"]),
    ("/usr/bin/true, no bash", ["/usr/bin/true"]),
]


def time_starts(
    argv: list[str], cwd: Path, n: int, kwargs: dict[str, object]
) -> tuple[list[float], float]:
    """Wall time of each start (ms), and the machine's CPU per start (ms)."""
    out = []
    busy = machine_busy_s()
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run(
            argv,
            cwd=cwd,
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            check=True,
            **kwargs,
        )
        out.append((time.perf_counter() - started) * 1000)
    return out, (machine_busy_s() - busy) * 1000 / n


@contextmanager
def bench_sandbox(prefix: str) -> Iterator[Sandbox]:
    """The sandbox a bot here would use, with the runs' directories in a temporary one."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        os.environ.setdefault("THREADLINE_RUNS_DIR", str(Path(tmp) / "runs"))
        Path(tmp).chmod(0o711)
        yield detect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="starts of each kind (default 200)")
    args = parser.parse_args()
    with bench_sandbox("threadline-sandbox-bench-") as full:
        workdir = full.workdir("bench-run", None)
        kinds: list[tuple[str, Sandbox | None]] = [("bare", None)]
        kinds.append(("setpriv (user + death signal)", dataclasses.replace(full, bwrap=None)))
        if full.bwrap:
            kinds.append((full.describe(), full))
        bare = None
        print(f"starting each {args.n} times (wall ms; the machine's CPU ms per start):")
        for label, box in kinds:
            print(f"  {label}")
            for name, command in COMMANDS:
                argv = command if box is None else box.argv(command, workdir)
                kwargs = {} if box is None else box.popen_kwargs()
                times, cpu = time_starts(argv, workdir, args.n, kwargs)
                times.sort()
                median = statistics.median(times)
                bare = bare or median
                print(
                    f"    {name:<24} p50 {median:6.2f}  p90 {times[int(len(times) * 0.9)]:6.2f}  "
                    f"{median / bare:4.1f}x bare shell line   CPU {cpu:5.2f}"
                )


if __name__ == "__main__":
    main()
