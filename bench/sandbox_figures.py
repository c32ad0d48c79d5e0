"""What the step sandbox costs: starting `bash -c true` bare, through setpriv (the step user and
the death signal) and inside bubblewrap, the way a bot starts a step's command.

    .venv/bin/python -m bench.sandbox_figures [--n 200]

Prints the median and p90 of each and the ratio to the bare start.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from engine_adapter.sandbox import Sandbox, detect


def time_starts(argv: list[str], cwd: Path, n: int, kwargs: dict[str, object]) -> list[float]:
    out = []
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
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="starts of each kind (default 200)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="threadline-sandbox-bench-") as tmp:
        os.environ.setdefault("THREADLINE_RUNS_DIR", str(Path(tmp) / "runs"))
        Path(tmp).chmod(0o711)
        full = detect()
        workdir = full.workdir("bench-run", None)
        kinds: list[tuple[str, Sandbox]] = [("bare bash -c", None)]  # type: ignore[list-item]
        kinds.append(("setpriv (user + death signal)", dataclasses.replace(full, bwrap=None)))
        if full.bwrap:
            kinds.append((full.describe(), full))
        bare = None
        print(f"starting `bash -c true` {args.n} times each (ms):")
        for label, box in kinds:
            argv = (
                ["bash", "-c", "true"] if box is None else box.argv(["bash", "-c", "true"], workdir)
            )
            kwargs = {} if box is None else box.popen_kwargs()
            times = sorted(time_starts(argv, workdir, args.n, kwargs))
            median = statistics.median(times)
            bare = bare or median
            print(
                f"  {label:<45} p50 {median:6.2f}  p90 {times[int(len(times) * 0.9)]:6.2f}  "
                f"{median / bare:4.1f}x bare"
            )


if __name__ == "__main__":
    main()
