"""Run one command in its own process group: streamed output, a cap, a timeout, and a kill switch.

The child asks the kernel to SIGKILL it when the bot dies (PR_SET_PDEATHSIG, set by the sandbox's
wrapper), and everything it starts shares its process group, which a successor bot kills before
it runs the next attempt.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

OUTPUT_CAP = 64 * 1024
TERM_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1


@dataclass
class ProcessResult:
    exit_code: int | None
    output: str
    dropped_bytes: int
    timed_out: bool
    stopped: bool  # killed because should_continue() said no (cancel or a superseded attempt)
    duration_s: float
    limit: str | None = None  # the step's limit that ended it ("memory limit 512 MiB reached")
    notes: tuple[str, ...] = ()  # said after its output


def as_text(raw: bytes | bytearray) -> str:
    """Output as text Postgres can store: invalid UTF-8 and NUL bytes become U+FFFD."""
    return raw.decode(errors="replace").replace("\x00", "\ufffd")


def die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: the successor's killpg still cleans up
        pass


def kill_group(
    pgid: int, grace_s: float = TERM_GRACE_S, ended: Callable[[], bool] = lambda: False
) -> None:
    """SIGTERM the group, then SIGKILL after the grace period (or once `ended()` says the
    command is done: a kept sandbox's loop lives on); returns when the group is gone. The
    SIGTERM spares bubblewrap's own processes: the outer one would die of it and take the
    sandbox down at once (its init gets SIGKILL with --die-with-parent), so the command inside
    would get no grace at all."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            if sig == signal.SIGTERM:
                _term_all_but_sandboxes(pgid)
            else:
                os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not group_exists(pgid) or (sig == signal.SIGTERM and ended()):
                break
            time.sleep(0.05)
        if not group_exists(pgid):
            return


def _term_all_but_sandboxes(pgid: int) -> None:
    """SIGTERM each running process of the group but bubblewrap's (all of it where there is
    none). ProcessLookupError: the group is gone."""
    members = list(_members(pgid))
    if not any(command == b"bwrap" for _, command in members):
        os.killpg(pgid, signal.SIGTERM)
        return
    for pid, command in members:
        if command != b"bwrap":
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def group_exists(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies, which hold no resources and
    wait for their parent, do not count). Reads /proc so that it never reaps anyone's child."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:  # the common case, and cheap: nothing left at all
        return False
    except PermissionError:
        pass
    return next(_members(pgid), None) is not None


def _members(pgid: int) -> Iterator[tuple[int, bytes]]:
    """(pid, command name) of each running process of the group, read from /proc."""
    # Reading every process's stat costs milliseconds of CPU (it was a third of a bots process's
    # time): plain scandir and bytes, no pathlib, and a group member's stat is usually early.
    group = str(pgid).encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                # The command name may hold spaces and parentheses: fields start after the last
                # ')'.
                head, tail = f.read().rsplit(b")", 1)
                fields = tail.split(maxsplit=4)
        except (OSError, ValueError):
            continue  # the process ended while we looked
        if len(fields) > 2 and fields[2] == group and fields[0] != b"Z":
            yield int(entry.name), head.split(b"(", 1)[-1]


def _feed(pipe: IO[bytes], text: str) -> None:
    # From a thread: a child that writes before it has read all its input must not deadlock us.
    try:
        pipe.write(text.encode())
        pipe.close()
    except (BrokenPipeError, ValueError):
        pass


def run_process(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    timeout_s: float,
    stdin_text: str | None = None,
    on_start: Callable[[int], None] = lambda pgid: None,
    on_output: Callable[[str], None] = lambda text: None,
    should_continue: Callable[[], bool] = lambda: True,
    check_every_s: float = 1.0,
    flush_every_s: float = 0.5,
    quiet_for_s: float = 1.0,
    popen_kwargs: dict[str, Any] | None = None,
    contained: bool = False,
    output_cap: int = OUTPUT_CAP,
) -> ProcessResult:
    """Run argv (its own session and process group) until it exits, times out or is stopped.
    `contained`: argv runs in a PID namespace of its own (bubblewrap), whose processes the kernel
    kills when its first process ends, so none can outlive the leader: no need to look for them
    (which costs a scan of /proc, a third of a bots process's CPU)."""
    started = time.monotonic()
    proc: subprocess.Popen[bytes] = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **(popen_kwargs or {}),
    )
    try:
        on_start(proc.pid)
    except BaseException:  # e.g. its network could not be set up: it must not run on
        kill_group(proc.pid, grace_s=0)
        proc.wait()
        raise
    if stdin_text is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin_text), daemon=True).start()
    assert proc.stdout is not None  # stdout=PIPE above
    followed = follow(
        proc.stdout.fileno(),
        proc.poll,
        lambda: kill_group(proc.pid),
        started,
        timeout_s=timeout_s,
        on_output=on_output,
        should_continue=should_continue,
        check_every_s=check_every_s,
        flush_every_s=flush_every_s,
        quiet_for_s=quiet_for_s,
        output_cap=output_cap,
    )
    exit_code = proc.wait()
    proc.stdout.close()
    if not contained and group_exists(proc.pid):  # the leader exited, its group lives on
        kill_group(proc.pid, grace_s=0.5)
    return followed.result(exit_code, started)


@dataclass
class Followed:
    """What follow() saw of a command: its output (capped) and how it ended."""

    kept: bytearray
    dropped: int
    timed_out: bool
    stopped: bool

    def result(self, exit_code: int | None, started: float) -> ProcessResult:
        return ProcessResult(
            exit_code,
            as_text(self.kept),
            self.dropped,
            self.timed_out,
            self.stopped,
            time.monotonic() - started,
        )


def follow(
    out: int,
    done: Callable[[], object],
    kill: Callable[[], None],
    started: float,
    *,
    timeout_s: float,
    on_output: Callable[[str], None],
    should_continue: Callable[[], bool],
    check_every_s: float = 1.0,
    flush_every_s: float = 0.5,
    quiet_for_s: float = 1.0,
    output_cap: int = OUTPUT_CAP,
    wake_on: int | None = None,
) -> Followed:
    """Read a command's output from the pipe `out` until its end, or until `done()` says the
    command has ended (not None; what it wrote is in the pipe by then), looking again whenever
    `wake_on` (a descriptor that says so) is readable; `kill()` ends the command at its timeout
    or when should_continue() says no."""
    kept = bytearray()
    dropped = 0
    pending = bytearray()
    timed_out = stopped = False
    last_check = last_flush = time.monotonic()
    selector = selectors.DefaultSelector()
    selector.register(out, selectors.EVENT_READ)
    if wake_on is not None:
        selector.register(wake_on, selectors.EVENT_READ)
    os.set_blocking(out, False)
    eof = False

    def take(chunk: bytes) -> None:
        nonlocal dropped
        room = output_cap - len(kept)
        kept.extend(chunk[:room])
        pending.extend(chunk[:room])
        dropped += max(0, len(chunk) - room)

    def read_now() -> bytes | None:
        """What the pipe holds now: b"" at its end, None when nothing is there yet."""
        try:
            return os.read(out, 65536)
        except BlockingIOError:
            return None

    while not eof:
        for key, _ in selector.select(timeout=0.1):
            if key.fd != out:
                continue
            chunk = read_now()
            if chunk == b"":
                eof = True
                break
            if chunk:
                take(chunk)
        if not eof and done() is not None:
            # The command is done, though something it started may hold the pipe open: what it
            # wrote is in the pipe already; take that and stop (its group is killed after).
            while chunk := read_now():
                take(chunk)
            eof = True
        now = time.monotonic()
        # Short commands stream nothing: their whole output arrives with the reply.
        if pending and now - started >= quiet_for_s and (now - last_flush >= flush_every_s or eof):
            on_output(as_text(pending))
            pending.clear()
            last_flush = now
        if not (timed_out or stopped):
            if now - started > timeout_s:
                timed_out = True
                kill()
            elif now - last_check >= check_every_s:
                last_check = now
                if not should_continue():
                    stopped = True
                    kill()
    selector.close()
    return Followed(kept, dropped, timed_out, stopped)
