"""A sandbox kept for one run's commands: started for the first, used again by the next.

Starting a sandbox for every command costs its namespaces, mounts and wrappers each time, most of
a step's start (docs/speed.md). So a bots process keeps one sandbox per run (and per fitting:
workdir, network, limits) and starts that run's commands in it, one at a time, as a CI job's
container serves the job's steps. What a step is promised holds:
- it is that run's own: another run, or another fitting of the same run, gets another;
- a command gets what a sandbox of its own gives it: exactly its environment (`env -i` starts
  it), its output alone (the loop's own stderr goes nowhere), no stdin;
- nothing outlives its command: the loop inside that starts each command kills every other
  process of the sandbox once it has ended (`kill -9 -1` in the sandbox's PID namespace: all but
  its init and the loop); what a command leaves in /tmp may reach the run's next (counted
  against its `tmp` limit with the run's directory, as before);
- the loop is out of its commands' reach: it runs from a copy of bash that the step user may
  execute but not read, which makes the kernel mark it non-dumpable, so no command may trace it
  or open its descriptors (`/proc/PID/fd`) to forge a request or an answer; a command that kills
  it ends the sandbox (bubblewrap's init exits with it, and the namespace with the init);
- a command that times out, is stopped or passes a limit ends the sandbox with it; a sandbox idle
  for KEEP_IDLE_S ends, and every one ends with its bots process (--die-with-parent; what a
  SIGKILLed bots process's bubblewrap could not end, the next one's start ends: step_guard).
A command with input on stdin, limits through cgroup v2, no bubblewrap, or
THREADLINE_STEP_SANDBOX_KEEP=off: the command starts a sandbox of its own.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from engine_adapter.model.errors import Invalid
from engine_adapter.sandbox import step_fit, step_guard, workdirs
from engine_adapter.sandbox.process_runner import ProcessResult, follow, kill_group
from engine_adapter.sandbox.sandbox import Sandbox
from engine_adapter.sandbox.workdirs import StepDir

log = logging.getLogger("threadline.sandbox")

KEEP_ENV = "THREADLINE_STEP_SANDBOX_KEEP"  # on (default) | off
KEEP_IDLE_S = 30.0  # a sandbox no command used for this long ends
MOST_KEPT = 16  # idle sandboxes a bots process keeps at most; the least recently used end first
LOOP_DIR = ".loop"  # under the runs root: the loop's execute-only bash
LOOP_PATH = "/run/threadline-loop"  # where a sandbox sees it
SYSTEM_BASH = ("/usr/bin/bash", "/bin/bash")
# What starts each command with exactly its environment: bash cannot (it reads some names as it
# exports them: LC_ALL, SHELLOPTS, RANDOM, OPTIND as arithmetic ..., and never passes `_`).
ENV_PROGRAM = "/usr/bin/env"
# Requests on the loop's stdin: the working directory, the environment's count and entries, the
# argv's count and entries, each ended by a NUL. Answers on its stdout: the exit status, a line.
# The command's output goes to the pipe the loop has as stderr (its fd 3), which the bot reads.
LOOP = r"""
trap : TERM  # a command stopped gets its grace: the loop, and so the sandbox, outlive the SIGTERM
# The commands' output on fd 3; the loop's own stderr nowhere, so that what the loop itself
# would say (a command killed by a signal: "Terminated") is never a command's output.
exec 3>&2 2>/dev/null
while IFS= read -r -d '' dir; do
  IFS= read -r -d '' count
  env=()
  for ((i = 0; i < count; i++)); do IFS= read -r -d '' entry; env+=("$entry"); done
  IFS= read -r -d '' count
  argv=()
  for ((i = 0; i < count; i++)); do IFS= read -r -d '' entry; argv+=("$entry"); done
  # The subshell becomes env, and env the command, with the environment given and no other.
  (cd -- "$dir" && exec ENV_PROGRAM -i -- "${env[@]}" "${argv[@]}") </dev/null 1>&3 2>&3 3>&-
  status=$?
  kill -9 -1 2>/dev/null
  # The status only once they are gone, reaped by init too: then no process of the command's
  # is left when the next one starts (the sandbox holds init and the loop alone).
  for ((tries = 0; tries < 5000; tries++)); do
    left=(/proc/[1-9]*)
    ((${#left[@]} <= 2)) && break
  done
  printf '%s\n' "$status"
done
""".replace("ENV_PROGRAM", ENV_PROGRAM)


def enabled() -> bool:
    raw = os.environ.get(KEEP_ENV, "on").strip().lower() or "on"
    if raw not in ("on", "off"):
        raise Invalid(f"{KEEP_ENV}={raw!r} must be on or off")
    return raw == "on"


@cache
def loop_binary(box: Sandbox) -> Path | None:
    """The loop's bash under the runs root, which the step user may execute and not read (made
    once per bots process); None where it cannot be made."""
    bash = system_bash()
    if bash is None:
        log.warning("steps start in sandboxes of their own: no bash program in %s", SYSTEM_BASH)
        return None
    where = box.runs_root / LOOP_DIR
    try:
        where.mkdir(mode=0o711, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, delete=False) as copy:
            with open(bash, "rb") as source:
                shutil.copyfileobj(source, copy)
        # Root's, for the step user: execute only. The bots process's own user's, where steps
        # run as that user: execute only for its owner, who may not read it either.
        os.chmod(copy.name, 0o711 if box.user else 0o100)
        path = where / "bash"
        os.replace(copy.name, path)
        return path
    except OSError as err:
        log.warning("steps start in sandboxes of their own: the loop's bash: %s", err)
        return None


def system_bash() -> str | None:
    """The system's bash, a program: never one found on PATH, which a bots process may have
    been given with a script named bash in front (a script cannot run execute-only)."""
    for path in SYSTEM_BASH:
        try:
            with open(path, "rb") as program:
                if program.read(4) == b"\x7fELF":
                    return path
        except OSError:
            continue
    return None


def usable(box: Sandbox) -> bool:
    return (
        enabled()
        and bool(box.bwrap)
        and step_guard.enforcement(box).cgroup is None
        and os.access(ENV_PROGRAM, os.X_OK)
        and loop_binary(box) is not None
    )


def describe(box: Sandbox) -> str:
    """What health adds to the sandbox's description: nothing where each command starts its
    own."""
    return "; a run's commands share one sandbox, kept while they come" if usable(box) else ""


@dataclass(frozen=True)
class Fitting:
    """What a kept sandbox was made for."""

    run_id: str
    workdir: Path
    mount: Path
    network: bool
    limits: tuple[tuple[str, float], ...]


class KeptSandbox:
    """One run's sandbox, its loop waiting for commands."""

    def __init__(
        self,
        box: Sandbox,
        step: StepDir,
        asked: Mapping[str, float],
        network: bool,
        run_dir: Path,
    ) -> None:
        self.status: int | None = None
        self.ended = False  # its loop is gone, or it must not serve another command
        self.used_at = time.monotonic()
        self._answer = b""
        self._stack = ExitStack()
        try:
            mount = self._stack.enter_context(workdirs.opened(box, step))
            self.fit = self._stack.enter_context(
                step_fit.fitted(box, asked, network, run_dir, kept=True)
            )
            loop = loop_binary(box)
            assert loop is not None  # usable() said so
            fit = replace(
                self.fit.fit, options=(*self.fit.fit.options, "--ro-bind", str(loop), LOOP_PATH)
            )
            argv = [LOOP_PATH, "--norc", "--noprofile", "-c", LOOP]
            out_r, out_w = os.pipe()
            self.output = out_r
            self._stack.callback(os.close, out_r)
            try:
                self.proc = subprocess.Popen(
                    box.argv(argv, step.path, mount=mount, fit=fit),
                    cwd=str(step.path),
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=out_w,
                    start_new_session=True,
                    pass_fds=mount.pass_fds + self.fit.pass_fds,
                    **box.popen_kwargs(),
                )
            finally:
                os.close(out_w)
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.answers = self.proc.stdout.fileno()
            os.set_blocking(self.answers, False)
            try:
                self.fit.started(self.proc.pid)  # its network, before the loop may start
            except BaseException:
                self.end()
                raise
        except BaseException:
            self._stack.close()
            raise

    def alive(self) -> bool:
        """Whether it may serve another command."""
        return not self.ended and self.proc.poll() is None

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        *,
        timeout_s: float,
        on_start: Callable[[int], None],
        on_output: Callable[[str], None],
        should_continue: Callable[[], bool],
    ) -> ProcessResult | None:
        """The command's result; None when the sandbox had ended before it could start it."""
        started = time.monotonic()
        self.used_at = started
        self.status, self._answer = None, b""
        self._drain()
        self.fit.guard.begin()
        request = [str(cwd), str(len(env)), *(f"{k}={v}" for k, v in env.items())]
        request += [str(len(argv)), *argv]
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"".join(part.encode() + b"\0" for part in request))
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            self.end()
            return None
        on_start(self.proc.pid)
        followed = follow(
            self.output,
            self._done,
            self._kill,
            started,
            timeout_s=timeout_s,
            on_output=on_output,
            should_continue=lambda: self.fit.within() and should_continue(),
            output_cap=self.fit.output_cap,
            wake_on=self.answers,
        )
        exit_code = self.status
        if exit_code is None:  # killed, or its loop ended: the sandbox ends with it
            self.ended = True
            exit_code = self.proc.wait()
        result = self.fit.judged(followed.result(exit_code, started))
        if result.limit or result.timed_out or result.stopped:
            self.ended = True
        self.used_at = time.monotonic()
        return result

    def _done(self) -> object:
        """The command's exit status once the loop has said it; True when the loop is gone."""
        try:
            chunk = os.read(self.answers, 64)
        except BlockingIOError:
            return None
        if not chunk:
            return True
        self._answer += chunk
        if b"\n" not in self._answer:
            return None
        self.status = int(self._answer.split(b"\n", 1)[0])
        return self.status

    def _kill(self) -> None:
        """End the command (SIGTERM, its grace, then the whole sandbox)."""
        self.ended = True
        kill_group(self.proc.pid, ended=lambda: self._done() is not None)

    def _drain(self) -> None:
        """What the last command's processes wrote as they were killed: not this command's."""
        os.set_blocking(self.output, False)
        try:
            while os.read(self.output, 65536):
                pass
        except BlockingIOError:
            pass

    def end(self) -> None:
        """End the sandbox (its loop ends at the end of its input) and what it held."""
        self.ended = True
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                kill_group(self.proc.pid, grace_s=0)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self._stack.close()


_lock = threading.Lock()
_idle: dict[Fitting, KeptSandbox] = {}


def run(
    box: Sandbox,
    run_id: str,
    step: StepDir,
    asked: Mapping[str, float],
    network: bool,
    run_dir: Path,
    argv: list[str],
    env: dict[str, str],
    *,
    timeout_s: float,
    on_start: Callable[[int], None],
    on_output: Callable[[str], None],
    should_continue: Callable[[], bool],
) -> ProcessResult | None:
    """The command in its run's kept sandbox (started now if there is none); None where no
    sandbox can be kept for it (the caller starts one of its own)."""
    if not usable(box) or not argv or "=" in argv[0]:  # env would take that for a variable
        return None
    fitting = Fitting(run_id, step.path, step.mount, network, tuple(sorted(asked.items())))
    end_idle()
    for _ in range(2):  # a kept one may have ended since it was last used: then a new one
        with _lock:
            sandbox = _idle.pop(fitting, None)
        if sandbox is not None and not sandbox.alive():
            sandbox.end()
            sandbox = None
        fresh = sandbox is None
        if sandbox is None:
            sandbox = KeptSandbox(box, step, asked, network, run_dir)
        try:
            result = sandbox.run(
                argv,
                env,
                step.path,
                timeout_s=timeout_s,
                on_start=on_start,
                on_output=on_output,
                should_continue=should_continue,
            )
        except BaseException:  # its command may still run: the sandbox ends with it
            sandbox.end()
            raise
        _give_back(fitting, sandbox)
        if result is not None or fresh:
            return result
    return None


def _give_back(fitting: Fitting, sandbox: KeptSandbox) -> None:
    if not sandbox.alive():
        sandbox.end()
        return
    with _lock:
        other = _idle.setdefault(fitting, sandbox)
    if other is not sandbox:  # another slot kept one for the same run meanwhile
        sandbox.end()


def end_idle() -> None:
    """End the sandboxes idle too long, and the least recently used beyond MOST_KEPT (each bot
    slot calls it as it looks for work, and each command before it runs)."""
    if not _idle:
        return
    now = time.monotonic()
    with _lock:
        ending = [f for f, s in _idle.items() if now - s.used_at > KEEP_IDLE_S]
        by_use = sorted(_idle, key=lambda f: _idle[f].used_at)
        ending += [f for f in by_use[: max(0, len(_idle) - MOST_KEPT)] if f not in ending]
        sandboxes = [_idle.pop(f) for f in ending]
    for sandbox in sandboxes:
        sandbox.end()


def end_all() -> None:
    """End every idle kept sandbox (a bots process stopping; a test)."""
    with _lock:
        ending = list(_idle.values())
        _idle.clear()
    for sandbox in ending:
        sandbox.end()
