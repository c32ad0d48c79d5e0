"""What a step's own network and limits add to starting its command, the way a bot starts it
(engine_adapter/sandbox/step_fit.py): the sandbox on the host's network (as before), in a network
namespace with no network (`network: false`), and with slirp4netns (`network: true`), each
with the step's limits (a /tmp on disk, the rlimits or cgroup, the samples at the end).

    .venv/bin/python -m bench.step_fit_figures [--n 100]

Prints, for each, the median and p90 of the start's wall time (from starting the command to having
its result, `/usr/bin/true`), and the CPU per start of the started processes (bubblewrap, setpriv,
prlimit, slirp4netns, the command), of the bot itself (the handshake, the /tmp directory, the disk
walk) and of the whole machine (from /proc/stat: it sees what the kernel does for namespaces
outside those processes, and also whatever else runs, so it is only meaningful on an idle
machine), each with its difference from the first.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from contextlib import ExitStack
from typing import Any

from bench.cpu import machine_busy_s
from bench.sandbox_figures import bench_sandbox
from engine_adapter.sandbox import afterwards, step_fit, workdirs
from engine_adapter.sandbox.process_runner import run_process
from engine_adapter.sandbox.sandbox import Sandbox

COMMAND = ["/usr/bin/true"]


def start_once(box: Sandbox, network: bool | None, command: list[str] = COMMAND) -> float:
    """One start, as the bot does it; network None: no fittings, on the host's network."""
    step = workdirs.step_dir(box, "bench-run", None)
    with ExitStack() as stack:
        mount = stack.enter_context(workdirs.opened(box, step))
        started = time.perf_counter()
        if network is None:
            argv = [a for a in box.argv(command, step.path, mount=mount) if a != "--unshare-net"]
            fds: tuple[int, ...] = ()
            fit = None
        else:
            fit = stack.enter_context(step_fit.fitted(box, {}, network, step.mount))
            argv = box.argv(command, step.path, mount=mount, fit=fit.fit)
            fds = fit.pass_fds
        result = run_process(
            argv,
            cwd=str(step.path),
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=60,
            popen_kwargs={**box.popen_kwargs(), "pass_fds": mount.pass_fds + fds},
            contained=True,
            on_start=fit.started if fit else lambda pid: None,
            should_continue=fit.within if fit else lambda: True,
        )
        if fit:
            result = fit.judged(result)
    if result.exit_code != 0:
        raise RuntimeError(f"the command failed: {result.output}")
    return (time.perf_counter() - started) * 1000


def cpu_s() -> tuple[float, float]:
    """This process's CPU, and that of its children it has reaped (the commands, bubblewrap,
    setpriv, prlimit, slirp4netns)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def measure(box: Sandbox, kinds: list[bool | None], n: int) -> list[dict[str, Any]]:
    """Each kind's wall ms per start, and its CPU ms per start (the machine's, the bot's, the
    started processes'), the kinds taking turns in rounds of 10 so that a busier moment of the
    machine falls on each alike."""
    figures: list[dict[str, Any]] = [
        {"wall": [], "machine": 0.0, "bot": 0.0, "started": 0.0} for _ in kinds
    ]
    for kind in kinds:
        start_once(box, kind)  # warm: the first start pays for caches
    for _ in range(0, n, 10):
        for kind, out in zip(kinds, figures, strict=True):
            busy, (own, children) = machine_busy_s(), cpu_s()
            out["wall"] += [start_once(box, kind) for _ in range(10)]
            afterwards.settled()  # its slirp4netns reaped, counted with the started processes
            own_after, children_after = cpu_s()
            out["machine"] += machine_busy_s() - busy
            out["bot"] += own_after - own
            out["started"] += children_after - children
    for out in figures:
        count = len(out["wall"])
        out["wall"].sort()
        for key in ("machine", "bot", "started"):
            out[key] *= 1000 / count
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="starts of each kind (default 100)")
    args = parser.parse_args()
    with bench_sandbox("threadline-fit-bench-") as box:
        if not box.bwrap:
            raise SystemExit(f"needs bubblewrap (steps here run {box.describe()})")
        print(f"steps run {box.describe()}; {step_fit.describe(box)}")
        print(f"starting {COMMAND[0]} {args.n} times each (ms; CPU per start):")
        kinds = [
            ("host network, tmpfs /tmp (before)", None),
            ("network: false, limits", False),
            ("network: true (slirp4netns), limits", True),
        ]
        figures = measure(box, [network for _, network in kinds], args.n)
        first = figures[0]
        for (label, _), out in zip(kinds, figures, strict=True):
            times = out["wall"]
            median, p90 = statistics.median(times), times[int(len(times) * 0.9)]
            added = median - statistics.median(first["wall"])
            print(
                f"  {label:<38} wall p50 {median:6.2f} p90 {p90:6.2f} (+{added:5.2f})"
                + "".join(
                    f"  {key} CPU {out[key]:5.2f} (+{out[key] - first[key]:5.2f})"
                    for key in ("started", "bot", "machine")
                )
            )


if __name__ == "__main__":
    main()
