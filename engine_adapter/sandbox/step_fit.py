"""What one command of a step adds to its sandbox: its network (step_network.py) and its limits
(step_limits.py, held by step_guard.py), set up before it starts and taken down when it ends."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from engine_adapter.sandbox import step_guard, step_limits, step_network
from engine_adapter.sandbox.process_runner import ProcessResult
from engine_adapter.sandbox.sandbox import Sandbox


@dataclass(frozen=True)
class Fit:
    """Sandbox.argv's parts for one command."""

    outer: tuple[str, ...] = ()  # before the wrapper, as the bots process's user
    options: tuple[str, ...] = ()  # bubblewrap's
    inner: tuple[str, ...] = ()  # inside the sandbox, before the command
    tmp: Path | None = None  # holds tmp/ and shm/, bound as /tmp and /dev/shm


@dataclass(frozen=True)
class Fitted:
    """A command's network and guard, as the bot's run_process call uses them."""

    fit: Fit
    network: step_network.Attachment
    guard: step_guard.Guard

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return self.network.pass_fds

    @property
    def output_cap(self) -> int:
        return self.guard.limits.output

    def started(self, pid: int) -> None:
        self.guard.started(pid)
        self.network.started(pid)

    def within(self) -> bool:
        return self.guard.within()

    def judged(self, result: ProcessResult) -> ProcessResult:
        """The result, with the limit that ended the command and what the step should know."""
        limit = self.guard.verdict(result)
        notes = list(result.notes)
        if result.dropped_bytes:
            notes.append(f"output limit {step_limits.show('output', self.output_cap)}")
        if self.network.note and (limit or result.exit_code != 0 or result.timed_out):
            notes.append(self.network.note)
        return replace(result, limit=limit, notes=tuple(notes))


@contextmanager
def fitted(
    box: Sandbox, asked: Mapping[str, float], network: bool, run_dir: Path, kept: bool = False
) -> Iterator[Fitted]:
    """One command's fittings (`kept`: a sandbox's kept for a run's commands, kept_sandbox.py).
    `asked`: the limits its recipe asked for (Instruction.limits); step_limits.LimitError when
    over this bots host's ceilings."""
    limits = step_limits.for_step(asked)
    with (
        step_network.attached(box, network) as attachment,
        step_guard.guarded(box, limits, run_dir, kept) as guard,
    ):
        fit = Fit(
            outer=guard.outer(), options=attachment.options, inner=guard.inner(), tmp=guard.tmp
        )
        yield Fitted(fit, attachment, guard)


def describe(box: Sandbox) -> str:
    """Each step's network and limits, in words, for `health`, `up` and the console."""
    limits = step_limits.for_step({})
    return (
        f"{step_network.describe(box)}; {step_guard.enforcement(box).describe()}: "
        f"{limits.describe()} by default"
    )
