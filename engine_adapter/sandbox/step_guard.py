"""How a bot holds one command of a step to its limits (step_limits.py), and names the limit that
ended it.

Two ways, the stronger where the host allows it (`threadline health` says which is in force):
- cgroup v2: each command runs in a cgroup of its own under a cgroup delegated to the bots
  process (THREADLINE_STEP_CGROUP, or its own when it is alone in it): memory.max (the whole
  step's memory, the kernel's OOM killer ends it), pids.max, and CPU time read from cpu.stat.
- rlimits otherwise (prlimit inside the sandbox): RLIMIT_DATA per process (not RLIMIT_AS, which
  runtimes that reserve address space, V8, Go, the JVM, would hit at start), RLIMIT_NPROC, which
  the kernel counts per user namespace and uid, so it holds per step only inside bubblewrap's
  own user namespace (outside it, it would count every step's processes of the step user across
  the machine, and one step's fork bomb would starve the others: there it is left unset), and
  RLIMIT_CPU per process. The bot also reads the step's processes each second (their count,
  memory and CPU together) and ends the step when they are over.
Either way: /tmp and /dev/shm are directories on disk under the runs root, not RAM; no file may
grow past `tmp` (RLIMIT_FSIZE); and the bot sums what the step's /tmp and its run's directory hold
each second while it runs and once at its end, ending or failing the step past `tmp`.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import stat
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING

from engine_adapter.sandbox.afterwards import later
from engine_adapter.sandbox.sandbox import Sandbox, SandboxError
from engine_adapter.sandbox.step_limits import Limits, format_size

if TYPE_CHECKING:
    from engine_adapter.sandbox.process_runner import ProcessResult

log = logging.getLogger("threadline.limits")

CGROUP_FS = Path("/sys/fs/cgroup")
CGROUP_ENV = "THREADLINE_STEP_CGROUP"  # a cgroup v2 directory delegated to the bots process
VIA_ENV = "THREADLINE_STEP_LIMITS_VIA"  # auto (default) | cgroup | rlimit
TMP_DIR = ".tmp"  # under the runs root: each command's /tmp and /dev/shm, on disk
SAMPLE_EVERY_S = 1.0
DISK_SHARE = 0.05  # the disk walk may take at most this share of a core while a step runs
FULL_SAMPLES = 2  # samples in a row at the process cap before a step is ended for it
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")
# What a program says when an allocation or a fork fails (ENOMEM, EAGAIN): under rlimits that is
# how a limit shows, when the program ends on it.
_NO_MEMORY = ("cannot allocate memory", "out of memory", "memoryerror", "bad_alloc")
_NO_FORK = ("fork", "blockingioerror", "thread", "clone", "spawn")


@dataclass(frozen=True)
class Enforcement:
    """How this bots process enforces limits."""

    cgroup: Path | None  # the cgroup whose children the commands get; None: rlimits
    prlimit: str | None
    per_step_pids: bool  # RLIMIT_NPROC counts per step (its own user namespace)
    why: str = ""  # why not cgroup v2

    def describe(self) -> str:
        if self.cgroup:
            return f"limits through cgroup v2 ({self.cgroup})"
        if not self.prlimit:
            return f"limits NOT enforced by the kernel (no prlimit; {self.why})"
        pids = "" if self.per_step_pids else ", processes only by the bot's count (no bubblewrap)"
        return f"limits through rlimits, memory per process{pids} ({self.why})"


@cache
def enforcement(box: Sandbox) -> Enforcement:
    """Chosen once per bots process (cgroup v2 set up here, which moves this process into a leaf
    cgroup of its own); THREADLINE_STEP_LIMITS_VIA=cgroup refuses to start without it."""
    wanted = os.environ.get(VIA_ENV, "auto").strip().lower() or "auto"
    if wanted not in ("auto", "cgroup", "rlimit"):
        raise SandboxError(f"{VIA_ENV}={wanted!r}: must be auto, cgroup or rlimit")
    prlimit = shutil.which("prlimit")
    cgroup, why = None, f"{VIA_ENV}=rlimit"
    if wanted != "rlimit":
        cgroup, why = _delegated_cgroup(box)
    if wanted == "cgroup" and cgroup is None:
        raise SandboxError(f"{VIA_ENV}=cgroup, but {why}")
    return Enforcement(cgroup, prlimit, bool(box.bwrap), why)


def _delegated_cgroup(box: Sandbox) -> tuple[Path | None, str]:
    """The cgroup v2 directory steps' cgroups go under, made ready, or None and why not."""
    if box.user and not box.setpriv:
        return None, "setpriv is missing, and a step must join its cgroup before it drops root"
    try:
        mounts = Path("/proc/self/mounts").read_text().split("\n")
    except OSError:
        mounts = []
    if not any(line.split()[1:3] == [str(CGROUP_FS), "cgroup2"] for line in mounts if line):
        return None, f"{CGROUP_FS} is not cgroup v2 (this host mounts cgroup v1)"
    named = os.environ.get(CGROUP_ENV, "").strip()
    try:
        if named:
            base = CGROUP_FS / named.removeprefix(str(CGROUP_FS)).lstrip("/")
            if (base / "cgroup.procs").read_text().split():
                return None, f"{CGROUP_ENV}={named} holds processes: name an empty cgroup"
        else:
            own = next(
                line[3:]
                for line in Path("/proc/self/cgroup").read_text().splitlines()
                if line.startswith("0::")
            )
            base = CGROUP_FS / own.lstrip("/")
            others = set((base / "cgroup.procs").read_text().split()) - {str(os.getpid())}
            if others:
                return None, (
                    f"the bots process shares its cgroup {own} with other processes: give it "
                    f"one of its own ({CGROUP_ENV}, or a systemd unit with Delegate=yes)"
                )
            leaf = base / "bots"  # a cgroup with controllers for its children holds no process
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
        missing = {"memory", "pids"} - set((base / "cgroup.controllers").read_text().split())
        if missing:
            return None, f"cgroup {base} lacks the {' and '.join(sorted(missing))} controller"
        (base / "cgroup.subtree_control").write_text("+memory +pids")
        for stale in base.glob("step-*"):  # a killed bots process's, once empty (another
            try:  # bots process's, in a shared cgroup, holds processes and stays)
                stale.rmdir()
            except OSError:
                pass
        probe = _new_cgroup(base, Limits(64 << 20, 8, None, None, 1024))
        _remove_cgroup(probe)
    except (OSError, StopIteration) as err:
        return None, f"cgroup v2 is not delegated to this process ({err})"
    return base, ""


def _new_cgroup(base: Path, limits: Limits) -> Path:
    path = base / f"step-{uuid.uuid4().hex[:12]}"
    path.mkdir()
    if limits.memory is not None:
        (path / "memory.max").write_text(str(limits.memory))
        swap = path / "memory.swap.max"
        if swap.exists():
            swap.write_text("0")
        (path / "memory.oom.group").write_text("1")  # the whole step ends, not one process
    if limits.pids is not None:
        (path / "pids.max").write_text(str(limits.pids + 3))  # sh, bubblewrap and its init
    return path


def _remove_cgroup(path: Path) -> None:
    kill = path / "cgroup.kill"
    deadline = time.monotonic() + 10
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                log.warning("cgroup %s could not be removed", path)
                return
        if kill.exists():
            kill.write_text("1")
        else:
            for pid in (path / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.02)


def _events(path: Path, name: str) -> dict[str, int]:
    try:
        lines = (path / name).read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v) for k, _, v in (line.partition(" ") for line in lines) if v.isdigit()}


def clear_leftovers(runs_root: Path) -> None:
    """At a bots process's start: the sandboxes and /tmp directories of commands whose bots
    process is gone."""
    root = runs_root / TMP_DIR
    if not root.is_dir():
        return
    end_strays(root)
    for entry in root.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove_tree(entry)


STRAY_LOOKS = 20  # at most, while each look ends some
STRAY_LOOK_GAP_S = 0.05


def end_strays(tmp_root: Path) -> list[int]:
    """SIGKILL every sandbox left by a bots process that is gone; the pids killed. bubblewrap's
    init waits for its outer process to let it go on, and only then asks to die with it: a bots
    process killed in between (its outer bubblewrap dies with it) leaves an init that waits for
    ever, or, a moment later, one that runs its command with no one to end it. Such a sandbox is
    known by its command line, which binds its /tmp from a directory named for its bots process
    (Guard.open), when that process is not its ancestor (gone, or its pid taken by another).
    Looked for again while a look finds any: an outer bubblewrap killed in its clone() still
    leaves the init it was making, which may appear after the look that killed the outer."""
    killed: list[int] = []
    for _ in range(STRAY_LOOKS):
        found = _kill_strays(os.fsencode(tmp_root) + b"/")
        if not found:
            break
        killed += [pid for pid in found if pid not in killed]
        time.sleep(STRAY_LOOK_GAP_S)
    if killed:
        log.warning("ended %d sandbox processes left by a bots process that is gone", len(killed))
    return killed


def _kill_strays(prefix: bytes) -> list[int]:
    killed = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue  # ended while we looked
        if os.path.basename(args[0]) != b"bwrap":
            continue
        bound = next((a[len(prefix) :] for a in args if a.startswith(prefix)), b"")
        owner = bound.split(b"-", 1)[0]
        pid = int(entry.name)
        if owner.isdigit() and int(owner) not in _ancestors(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                continue
    return killed


def _ancestors(pid: int) -> set[int]:
    """The pids above pid's, up to init's."""
    found: set[int] = set()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break  # ended while we looked: what was found stands
        if pid in found:
            break
        found.add(pid)
    return found


def _remove_tree(path: Path) -> None:
    """Remove what a step left, also where it took away its own write or search permission.
    shutil.rmtree works through descriptors and never follows a link; the permissions are
    given back first, each through a descriptor too (a path could be swapped for a link)."""
    _open_up(path)
    shutil.rmtree(path, ignore_errors=True)


def disk_usage(path: Path) -> int:
    """Bytes of disk the files under path take (their blocks: a sparse file counts what it
    holds). A directory a step made unreadable is opened up first (its owner is the step user,
    or this process's own user, who may); no link is ever followed, so a step that swaps a
    directory for a link cannot make this process change or count anything outside."""
    total = _open_up_top(path)
    for _, dirs, files, dir_fd in _walk(path):
        for name in dirs:  # opened up before the walk goes down into it
            total += _open_up_entry(name, dir_fd)
        for name in files:
            try:
                total += os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


def _walk(path: Path) -> Iterator[tuple[str, list[str], list[str], int]]:
    """os.fwalk of path without following links; nothing when path is gone (fwalk raises only
    for its top: what vanishes below it is passed over)."""
    try:
        yield from os.fwalk(path, follow_symlinks=False)
    except OSError:
        return


def _open_up(path: Path) -> None:
    """Give the owner of directory `path` (not a link) rwx on it and every directory below."""
    _open_up_top(path)
    for _, dirs, _, dir_fd in _walk(path):
        for name in dirs:
            _open_up_entry(name, dir_fd)


def _open_up_top(path: Path) -> int:
    """_open_up_entry for path itself, from its parent's descriptor."""
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        return _open_up_entry(path.name, parent)
    finally:
        os.close(parent)


def _open_up_entry(name: str, dir_fd: int) -> int:
    """Give the owner rwx on the directory `name` in dir_fd, never through a link (O_PATH with
    O_NOFOLLOW and O_DIRECTORY refuses one; chmod then acts on the descriptor's own inode);
    returns its blocks in bytes, 0 when it is gone or not a directory."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | 0o700)
        return st.st_blocks * 512
    except OSError:
        return 0
    finally:
        os.close(fd)


def process_tree(leader: int) -> Iterator[tuple[int, list[str]]]:
    """Leader and its descendants: each one's pid and /proc/PID/stat fields (after the command
    name)."""
    stack = [leader]
    while stack:
        pid = stack.pop()
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        yield pid, text[text.rindex(")") + 2 :].split()
        for task in tasks:
            try:
                stack += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
            except OSError:
                continue


def _private_bytes(pid: int) -> int:
    """A process's resident memory less what it shares (libraries, another's pages): summed
    over a step's processes, shared pages would count once per process."""
    try:
        fields = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return 0
    return (int(fields[1]) - int(fields[2])) * _PAGE


class Guard:
    """One command's limits while it runs: the argv parts that set them, the samples the bot
    takes at each heartbeat, and which limit ended it."""

    def __init__(
        self, via: Enforcement, limits: Limits, box: Sandbox, run_dir: Path, kept: bool = False
    ) -> None:
        self.via = via
        self.limits = limits
        self.box = box
        self.run_dir = run_dir
        self.tmp: Path | None = None  # holds tmp/ (the step's /tmp) and shm/ (its /dev/shm)
        self.cgroup: Path | None = None
        self.hit: str | None = None
        self.leader: int | None = None
        self.full_samples = 0
        self.disk_at = 0.0  # when the disk may be walked next
        # A sandbox kept for a run's commands (kept_sandbox.py) holds a process of its own (the
        # loop that starts them, bubblewrap's init's child), whose reaped children hold earlier
        # commands' CPU: the samples leave it out.
        self.extra = 1 if kept else 0

    # -- set up -----------------------------------------------------------------------------------
    def open(self) -> None:
        if self.box.bwrap:
            root = self.box.runs_root / TMP_DIR
            root.mkdir(mode=0o711, parents=True, exist_ok=True)
            self.tmp = root / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self.tmp.mkdir(mode=0o700)
            for name in ("tmp", "shm"):
                (self.tmp / name).mkdir(mode=0o700)
            if self.box.user:
                for path in (self.tmp, self.tmp / "tmp", self.tmp / "shm"):
                    os.chown(path, *self.box.user)
        if self.via.cgroup:
            self.cgroup = _new_cgroup(self.via.cgroup, self.limits)

    def close(self) -> None:
        if self.cgroup:
            later(partial(_remove_cgroup, self.cgroup))
        if self.tmp:
            later(partial(_remove_tree, self.tmp))

    def outer(self) -> tuple[str, ...]:
        """Run before the sandbox's wrapper, as the bots process's user: join the cgroup."""
        if not self.cgroup:
            return ()
        return ("/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', str(self.cgroup / "cgroup.procs"))

    def inner(self) -> tuple[str, ...]:
        """Run inside the sandbox, before the command: its rlimits."""
        if not self.via.prlimit:
            return ()
        limits = self.limits
        args = []
        if limits.tmp is not None:
            args.append(f"--fsize={limits.tmp}")
        if not self.cgroup:
            if limits.memory is not None:
                args.append(f"--data={limits.memory}")
            if limits.pids is not None and self.via.per_step_pids:
                # bubblewrap's init is one, and a kept sandbox's loop another
                args.append(f"--nproc={limits.pids + 1 + self.extra}")
            if limits.cpu is not None:
                args.append(f"--cpu={int(limits.cpu)}:{int(limits.cpu) + 2}")
        return (self.via.prlimit, *args, "--") if args else ()

    # -- while it runs --------------------------------------------------------------------------
    def started(self, pid: int) -> None:
        self.leader = pid

    def within(self) -> bool:
        """Sampled at each heartbeat: False (and `hit` says which) once the step is over a
        limit; the bot then ends it."""
        if self.hit is None:
            self.hit = self._over() or self._disk_over(time.monotonic())
        return self.hit is None

    def _over(self) -> str | None:
        limits = self.limits
        if self.cgroup:
            if _events(self.cgroup, "memory.events").get("oom_kill"):
                return self._reached("memory")
            if _events(self.cgroup, "pids.events").get("max"):
                return self._reached("pids")
            used = _events(self.cgroup, "cpu.stat").get("usage_usec", 0) / 1e6
            return self._reached("cpu") if limits.cpu and used > limits.cpu else None
        if self.leader is None:
            return None
        tasks, rss, ticks = self._totals()
        if limits.memory is not None and rss > limits.memory:
            return self._reached("memory")
        if limits.cpu is not None and ticks / _TICKS > limits.cpu:
            return self._reached("cpu")
        if limits.pids is not None and tasks > limits.pids:
            self.full_samples += 1
            if self.full_samples >= FULL_SAMPLES:
                return self._reached("pids")
        else:
            self.full_samples = 0
        return None

    def _totals(self) -> tuple[int, int, int]:
        """(processes, private bytes, CPU ticks) of the leader's tree: bubblewrap's own outer
        process not counted, nor a kept sandbox's loop."""
        assert self.leader is not None
        tasks = rss = ticks = 0
        parents: dict[int, int] = {}
        for pid, fields in process_tree(self.leader):
            parents[pid] = int(fields[1])
            if self.extra and parents.get(parents[pid]) == self.leader:  # init's child: the loop
                continue
            tasks += int(fields[17])
            rss += _private_bytes(pid)
            ticks += sum(int(v) for v in fields[11:15])  # own and reaped children's CPU
        if self.box.bwrap:
            tasks -= 1  # bubblewrap's own process outside the namespace
        return tasks, rss, ticks

    def begin(self) -> None:
        """A kept sandbox's next command: nothing hit yet."""
        self.hit, self.full_samples, self.disk_at = None, 0, 0.0

    def _disk_over(self, now: float, final: bool = False) -> str | None:
        if self.limits.tmp is None or (now < self.disk_at and not final):
            return None
        used = disk_usage(self.run_dir) + (disk_usage(self.tmp) if self.tmp else 0)
        took = time.monotonic() - now
        self.disk_at = now + max(SAMPLE_EVERY_S, took / DISK_SHARE)
        if used > self.limits.tmp:
            return self._reached(
                "tmp", f"its /tmp and its run's directory hold {format_size(used, ' ')}"
            )
        return None

    def _reached(self, key: str, why: str = "") -> str:
        return f"{self.limits.named(key)} reached" + (f" ({why})" if why else "")

    # -- after ----------------------------------------------------------------------------------
    def verdict(self, result: ProcessResult) -> str | None:
        """The limit that ended (or, for tmp, was passed by) the command, or None."""
        if self.hit:
            return self.hit
        self.hit = self._disk_over(time.monotonic(), final=True)
        if self.hit or (result.exit_code == 0 and not result.timed_out) or result.stopped:
            return self.hit
        limits, tail = self.limits, result.output[-4096:].lower()
        if self.cgroup:
            if limits.memory is not None and _events(self.cgroup, "memory.events").get("oom_kill"):
                return self._reached("memory")
            if limits.pids is not None and _events(self.cgroup, "pids.events").get("max"):
                return self._reached("pids")
        code = result.exit_code
        sig = -code if code is not None and code < 0 else (code or 0) - 128
        if limits.cpu is not None and (sig == signal.SIGXCPU or "cpu time limit" in tail):
            return self._reached("cpu")
        if limits.tmp is not None and (sig == signal.SIGXFSZ or "file size limit" in tail):
            return self._reached("tmp", "a file grew past it")
        if self.cgroup:
            return None
        if limits.memory is not None and any(m in tail for m in _NO_MEMORY):
            return self._reached("memory", "an allocation failed")
        if (
            limits.pids is not None
            and "resource temporarily unavailable" in tail
            and any(m in tail for m in _NO_FORK)
        ):
            return self._reached("pids", "a new process was refused")
        return None


@contextmanager
def guarded(box: Sandbox, limits: Limits, run_dir: Path, kept: bool = False) -> Iterator[Guard]:
    """A command's guard (or a kept sandbox's), with its /tmp and cgroup made now and removed
    when it is done."""
    guard = Guard(enforcement(box), limits, box, run_dir, kept)
    try:
        guard.open()
        yield guard
    finally:
        guard.close()
