"""A sandbox kept for one run's commands (THREADLINE_STEP_SANDBOX_KEEP=on, kept_sandbox.py)
against one started per command, as a bot starts them (the step user, limits, no network).

    .venv/bin/python -m bench.warm_sandbox_figures [--n 100] [--commands-per-sandbox 3]

Prints, for each kind, the machine's CPU per command (from /proc/stat: the kernel's work for
namespaces and mounts included; on a busy machine others' work too), medians of rounds in
turns: a sandbox per command (THREADLINE_STEP_SANDBOX_KEEP=off), a kept sandbox's next command
(the default), and a kept sandbox's commands with its own start and end shared by
`--commands-per-sandbox` of them (a run's steps).
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable

from bench.cpu import machine_busy_s
from bench.sandbox_figures import bench_sandbox
from bench.step_fit_figures import start_once
from engine_adapter.sandbox import kept_sandbox, step_fit, workdirs
from engine_adapter.sandbox.sandbox import Sandbox

COMMANDS = {"/usr/bin/true": ["/usr/bin/true"], "bash -c true": ["bash", "-c", "true"]}
RUN_ID = "bench-run"
PER_COMMAND = "a sandbox per command (keep off)"


def kept_once(box: Sandbox, argv: list[str]) -> None:
    step = workdirs.step_dir(box, RUN_ID, None)
    result = kept_sandbox.run(
        box,
        RUN_ID,
        step,
        {},
        False,
        box.runs_root / RUN_ID,
        argv,
        {"PATH": "/usr/bin:/bin"},
        timeout_s=60,
        on_start=lambda pgid: None,
        on_output=lambda text: None,
        should_continue=lambda: True,
    )
    if result is None or result.exit_code != 0:
        raise RuntimeError(f"{argv} failed in the kept sandbox: {result}")


def per_round(one: Callable[[], None], each: int = 10) -> float:
    """The machine's CPU ms per call of `one`, over `each` calls."""
    busy = machine_busy_s()
    for _ in range(each):
        one()
    return (machine_busy_s() - busy) * 1000 / each


def measure(box: Sandbox, argv: list[str], n: int, share: int, each: int) -> dict[str, list[float]]:
    def shared() -> None:
        kept_sandbox.end_all()
        for _ in range(share):
            kept_once(box, argv)
        kept_sandbox.end_all()

    kinds: dict[str, Callable[[], None]] = {
        PER_COMMAND: lambda: start_once(box, False, argv),
        "kept: its next command": lambda: kept_once(box, argv),
    }
    figures: dict[str, list[float]] = {kind: [] for kind in kinds}
    shared_kind = f"kept, its start shared by {share}"
    figures[shared_kind] = []
    for one in kinds.values():
        one()  # warm caches, and the kept sandbox
    for _ in range(0, n, each):
        for kind, one in kinds.items():
            figures[kind].append(per_round(one, each))
        rounds = max(1, each // share)
        figures[shared_kind].append(per_round(shared, rounds) / share)
        kept_once(box, argv)  # the kept kind's sandbox again, for its next round
    kept_sandbox.end_all()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="commands of each kind (default 100)")
    parser.add_argument("--commands-per-sandbox", type=int, default=3)
    parser.add_argument(
        "--round",
        type=int,
        default=30,
        help="commands of a kind in a row (default 30): /proc/stat counts in ticks of 10 ms",
    )
    args = parser.parse_args()
    os.environ[kept_sandbox.KEEP_ENV] = "on"
    os.environ.setdefault("THREADLINE_STEP_LIMITS_VIA", "rlimit")  # kept only with rlimits
    with bench_sandbox("threadline-kept-bench-") as box:
        if not kept_sandbox.usable(box):
            raise SystemExit(f"no sandbox can be kept here (steps run {box.describe()})")
        print(f"steps run {box.describe()}; {step_fit.describe(box)}")
        print(f"{args.n} commands of each kind; the machine's CPU ms per command, medians")
        for name, argv in COMMANDS.items():
            figures = measure(box, argv, args.n, args.commands_per_sandbox, args.round)
            each = statistics.median(figures[PER_COMMAND])
            print(f"  {name}")
            for kind, values in figures.items():
                median = statistics.median(values)
                ratio = median / each
                print(f"    {kind:<34} {median:6.2f} ms  ({ratio:4.2f}x a sandbox per command)")


if __name__ == "__main__":
    main()
