"""Where a step works: its run's own directory, a directory inside it, or an absolute directory
an administrator allowed.

A recipe's `workdir:` is chosen by whoever writes recipes, and the bots process is often root, so
the bots process never creates, chowns or writes a path a recipe names outside the run's own
directory:
- every run has a directory of its own under the runs root (0700, the step user's), the only one
  of the runs root that its steps see, bound writable at its own path;
- a relative `workdir:` lies inside it (no `..`); missing directories are made one at a time
  through directory descriptors that never follow a symbolic link, so a link that an earlier step
  planted cannot lead the making outside the run's directory;
- an absolute `workdir:` must already exist and lie inside a directory of THREADLINE_WORKDIRS (the
  bots process's environment, colon-separated);
- the account's home, Threadline's installation, THREADLINE_HOME, the runs root, the embedded
  server's data and every path hidden from steps are never a step's working directory, whatever
  THREADLINE_WORKDIRS says (an entry overlapping one is refused when the bots process starts).

Each command binds the directory from a descriptor opened and checked just before (bubblewrap's
--bind-fd), so a path renamed or swapped for a link in between binds nothing else.
"""

from __future__ import annotations

import errno
import os
import site
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

from engine_adapter.model.settings import threadline_home
from engine_adapter.sandbox.sandbox import (
    RUNS_DIR_ENV,
    STEP_DIRS_ENV,
    VAR_LIB,
    Sandbox,
    SandboxError,
)

WORKDIRS_ENV = "THREADLINE_WORKDIRS"  # where absolute workdirs may lie (colon-separated)
RELATIVE = "a relative workdir lies inside the run's own directory"
_WALK = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Forbidden = tuple[tuple[Path, str], ...]  # (path, what it is, in words)


# -- what a recipe may write ---------------------------------------------------------------------
def declared_problem(workdir: object) -> str | None:
    """What is wrong with a recipe's `workdir:` as written (the rest of a sentence that starts
    with the value), or None. Checked when a recipe is validated and again before a step runs."""
    if not isinstance(workdir, str):
        return "must be a string"
    if not workdir.strip():
        return f"must name a directory ({RELATIVE}; an absolute one inside {WORKDIRS_ENV})"
    if "\x00" in workdir:
        return "must not hold a NUL character"
    if ".." in PurePosixPath(workdir).parts:
        return (
            f'must not hold a ".." component ({RELATIVE}; an absolute one inside a directory '
            f"of {WORKDIRS_ENV})"
        )
    return None


# -- what no step may work in --------------------------------------------------------------------
def install_paths() -> list[Path]:
    """Threadline's installation: Python's prefixes and library directories (the venv, its
    site-packages) and the directory this package is imported from (a checkout, when installed
    editable). A step that could write there would run code in the next Threadline command."""
    paths = {sys.prefix, sys.exec_prefix}
    paths |= {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= set(site.getsitepackages())
    if site.ENABLE_USER_SITE:  # ~/.local/lib/pythonX.Y/site-packages, when Python reads it
        paths.add(site.getusersitepackages())
    paths.add(str(Path(__file__).resolve().parents[2]))
    return sorted({Path(p).resolve() for p in paths if p} - {Path("/")})


def forbidden_paths(box: Sandbox) -> Forbidden:
    """Every path no step may work in, with what it is: the sandbox's hidden and private paths
    (THREADLINE_HOME, the runs root, the embedded server's data, the account's home, ...) and the
    installation."""
    named = {
        threadline_home().expanduser().resolve(): "THREADLINE_HOME (the credentials)",
        box.runs_root: f"the runs root ({RUNS_DIR_ENV}), every run's directory",
        VAR_LIB: "the embedded server's data",
    }
    out: list[tuple[Path, str]] = []
    for path in box.hidden:
        out.append((path, named.get(path, "a path hidden from steps")))
    out += [(path, "the home directory of the account running Threadline") for path in box.private]
    out += [(path, "Threadline's installation") for path in install_paths()]
    return tuple(out)


def _overlap(path: Path, forbidden: Forbidden) -> tuple[Path, str] | None:
    """The forbidden path that `path` lies in or holds, the deepest first (the most telling)."""
    hits = [
        (bad, what)
        for bad, what in forbidden
        if path == bad or path.is_relative_to(bad) or bad.is_relative_to(path)
    ]
    return max(hits, key=lambda hit: len(hit[0].parts), default=None)


def check_step_dirs(shared: Iterable[Path]) -> None:
    """Every step may write THREADLINE_STEP_DIRS: none may overlap the installation."""
    install = tuple((path, "Threadline's installation") for path in install_paths())
    for path in shared:
        hit = _overlap(path, install)
        if hit:
            raise SandboxError(
                f"{STEP_DIRS_ENV}: {path} overlaps {hit[0]} ({hit[1]}), which no step may write"
            )


def allowed_workdirs(value: str | None, forbidden: Forbidden) -> tuple[Path, ...]:
    """THREADLINE_WORKDIRS as the bots process reads it at start-up: absolute directories, none
    overlapping a forbidden path (refused here, before any step runs)."""
    out: list[Path] = []
    for part in (value or "").split(":"):
        if not part.strip():
            continue
        path = Path(part.strip())
        if not path.is_absolute() or declared_problem(part.strip()):
            raise SandboxError(
                f'{WORKDIRS_ENV}: {part!r} must be an absolute path without ".." components'
            )
        path = path.resolve()
        hit = _overlap(path, forbidden)
        if hit:
            raise SandboxError(
                f"{WORKDIRS_ENV}: {part.strip()} overlaps {hit[0]} ({hit[1]}), where no step may "
                "work: allow directories outside it"
            )
        if path not in out:
            out.append(path)
    return tuple(out)


def describe(allowed: Iterable[Path]) -> str:
    """For `health`: where absolute workdirs may lie."""
    allowed = list(allowed)
    if not allowed:
        return f"absolute workdirs: none ({WORKDIRS_ENV} unset)"
    return f"absolute workdirs: inside {', '.join(map(str, allowed))} ({WORKDIRS_ENV})"


def check_absolute(box: Sandbox, declared: str, real: Path) -> None:
    """An absolute workdir whose real path (links resolved) is `real` must lie inside a directory
    of THREADLINE_WORKDIRS and outside every forbidden path."""
    shown = declared if Path(declared) == real else f"{declared} (which is {real})"
    hit = _overlap(real, box.forbidden)
    if hit:
        raise SandboxError(
            f"workdir {shown} overlaps {hit[0]} ({hit[1]}): no step may work there, "
            f"whatever {WORKDIRS_ENV} allows"
        )
    if not any(real == ok or real.is_relative_to(ok) for ok in box.workdirs):
        allowed = ":".join(map(str, box.workdirs)) or "unset"
        raise SandboxError(
            f"workdir {shown} is not inside a directory this bot process allows "
            f"({WORKDIRS_ENV}={allowed}): name a workdir relative to the run's own directory, "
            f"or have an administrator add a directory to {WORKDIRS_ENV}"
        )


# -- a step's directory --------------------------------------------------------------------------
@dataclass(frozen=True)
class StepDir:
    """Where a step works (its cwd and HOME), and the one directory it may write, bound at its
    own path: the run's own directory (for a relative workdir too), or an absolute workdir."""

    path: Path
    mount: Path


def step_dir(box: Sandbox, run_id: str, declared: object) -> StepDir:
    """The step's directory, checked (and, inside the run's own directory, made) now; raises
    SandboxError naming the path when the recipe's workdir may not be used."""
    if declared is not None and (problem := declared_problem(declared)):
        raise SandboxError(f"workdir {declared!r} {problem}")
    if isinstance(declared, str) and declared.startswith("/"):
        real = Path(os.path.realpath(declared))
        check_absolute(box, declared, real)
        if not real.is_dir():
            raise SandboxError(
                f"workdir {declared} does not exist or is not a directory: an absolute workdir "
                "is used as it is, never made; create it (writable by the user steps run as), "
                "or name a workdir relative to the run's own directory"
            )
        return StepDir(real, real)
    own = run_dir(box, run_id)
    relative = declared if isinstance(declared, str) else "."  # checked above: a string or None
    parts = [p for p in PurePosixPath(relative).parts if p != "."]
    if parts:
        os.close(_make_inside(os.open(own, _WALK), parts, box.user, f"workdir {declared}"))
    return StepDir(own.joinpath(*parts), own)


def run_dir(box: Sandbox, run_id: str) -> Path:
    """The run's own directory under the runs root: made here (0700, the step user's) when
    missing, never through a link."""
    if not run_id or "/" in run_id or run_id in (".", "..") or "\x00" in run_id:
        raise SandboxError(f"run id {run_id!r} cannot name a directory")
    box.runs_root.mkdir(parents=True, exist_ok=True, mode=0o711)
    root = os.open(box.runs_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    os.close(_make_inside(root, [run_id], box.user, "the run's directory", "the runs root"))
    return box.runs_root / run_id


def _make_inside(
    fd: int,
    parts: list[str],
    owner: tuple[int, int] | None,
    subject: str,
    what: str = "the run's own directory",
) -> int:
    """Walk `parts` down from the directory `fd` (closed here), making what is missing (0700,
    given to `owner`), through descriptors that never follow a link; returns the last one's."""
    try:
        for part in parts:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
                made = True
            except FileExistsError:  # a directory already, or what the open below refuses
                made = False
            try:
                child = os.open(part, _WALK, dir_fd=fd)
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise
                kind = "a symbolic link" if _is_link(part, fd) else "not a directory"
                raise SandboxError(
                    f"{subject}: {part!r} in {what} is {kind}, and a step's directory "
                    "is never reached through one (refused, nothing made)"
                ) from None
            os.close(fd)
            fd = child
            if made:
                if owner:
                    os.fchown(fd, *owner)
                os.fchmod(fd, 0o700)  # whatever the umask
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class Mount:
    """The directory a command may write, opened for the one command: bubblewrap binds the
    descriptor (from 0.8; an older one binds the path checked a moment before)."""

    path: Path
    fd: int
    by_fd: bool

    def bwrap_args(self) -> list[str]:
        if self.by_fd:
            return ["--bind-fd", str(self.fd), str(self.path)]
        return ["--bind", str(self.path), str(self.path)]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """For Popen: bubblewrap closes the descriptor once bound, so no step holds it."""
        return (self.fd,) if self.by_fd else ()


@contextmanager
def opened(box: Sandbox, step: StepDir) -> Iterator[Mount]:
    """The step's writable directory held open for one command, checked again through the
    descriptor: an absolute workdir renamed or replaced since is refused, not followed."""
    try:
        fd = os.open(step.mount, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise SandboxError(f"workdir {step.mount} cannot be opened: {err.strerror}") from None
    try:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if step.mount.is_relative_to(box.runs_root):
            if real != step.mount:
                raise SandboxError(f"the run's directory {step.mount} moved (now {real})")
        else:
            check_absolute(box, str(step.mount), real)
        yield Mount(real, fd, bool(box.bwrap) and binds_fds(box.bwrap))
    finally:
        os.close(fd)


@cache
def binds_fds(binary: str) -> bool:
    """Whether this bubblewrap binds a descriptor (--bind-fd, from 0.8)."""
    try:
        out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--bind-fd" in out.stdout + out.stderr
