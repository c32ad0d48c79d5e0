"""Where a step's command runs: outside Threadline's trust boundary.

A step's command is untrusted code. It must never reach Threadline's credentials, secrets,
database roles or gates, so it runs
- as the unprivileged user `threadline-step` when Threadline runs as root, and
- inside bubblewrap where it is installed: a read-only view of the system, a private /tmp, its
  own process namespace (it cannot see the bot or read its environment), and every Threadline
  path hidden (the home with the credentials, other runs' directories, the embedded server's
  data, the console's users file), with only its run's working directory writable.
Without either (not root, no bubblewrap) steps run unsandboxed, and `health`, `up` and the
console say so plainly.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from engine_adapter.model.errors import Invalid
from engine_adapter.model.settings import threadline_home

if TYPE_CHECKING:
    from engine_adapter.sandbox.step_fit import Fit
    from engine_adapter.sandbox.workdirs import Mount

log = logging.getLogger("threadline.sandbox")

STEP_USER = "threadline-step"
SANDBOX_ENV = "THREADLINE_SANDBOX"  # auto (default) | bwrap | user | none
RUNS_DIR_ENV = "THREADLINE_RUNS_DIR"  # where runs' working directories live
STEP_DIRS_ENV = "THREADLINE_STEP_DIRS"  # extra directories every step may write (colon-separated)
HIDE_ENV = "THREADLINE_STEP_HIDE"  # extra paths no step may see (colon-separated)
USERS_FILE_ENV = "THREADLINE_CONSOLE_USERS"
VAR_LIB = Path("/var/lib/threadline")  # the embedded server's data when run as root
MODES = ("bwrap", "user", "none")
RESOLVER_DIR = "/run/systemd/resolve"  # systemd-resolved's settings, kept in a step's own /run


class SandboxError(Invalid):
    """The sandbox asked for cannot be set up; the message says what to change."""


class RunAs(TypedDict, total=False):
    """subprocess arguments that run a process as the step user (Popen's own names)."""

    preexec_fn: Callable[[], None]
    user: int
    group: int
    extra_groups: list[int]


@dataclass(frozen=True)
class Sandbox:
    """How this bot process runs step commands."""

    bwrap: str | None  # the bubblewrap binary, when steps run inside it
    user: tuple[int, int] | None  # (uid, gid) steps run as, when Threadline runs as root
    runs_root: Path
    shared: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()  # never visible, whatever is shared
    private: tuple[Path, ...] = ()  # hidden unless shared (the account's home directory)
    setpriv: str | None = field(default_factory=lambda: shutil.which("setpriv"))
    workdirs: tuple[Path, ...] = ()  # where absolute workdirs may lie ($THREADLINE_WORKDIRS)
    forbidden: tuple[tuple[Path, str], ...] = ()  # never a workdir: (path, what it is)

    @property
    def mode(self) -> str:
        return "+".join(m for m, on in (("bwrap", self.bwrap), ("user", self.user)) if on) or "none"

    @property
    def isolated(self) -> bool:
        return self.mode != "none"

    @property
    def contains_descendants(self) -> bool:
        """Whether a step's processes all end with it: bubblewrap runs it in a PID namespace of
        its own (--unshare-pid), and the kernel kills the namespace when its init ends."""
        return bool(self.bwrap)

    def describe(self) -> str:
        """In words, for `health`, `up` and the console."""
        if self.bwrap and self.user:
            return f"sandboxed: bubblewrap, as user {STEP_USER}"
        if self.bwrap:
            return "sandboxed: bubblewrap"
        if self.user:
            return (
                f"as user {STEP_USER}, without a sandbox (install bubblewrap): steps cannot "
                "read Threadline's files or processes, but can read other runs' directories"
            )
        return (
            "UNSANDBOXED: steps run as Threadline's own user and can read its credentials "
            "and secrets; install bubblewrap (Debian: apt-get install bubblewrap)"
        )

    def workdir(self, run_id: str, declared: str | None = None) -> Path:
        """The step's working directory, checked and made as workdirs.step_dir does (its one
        home): the run's own directory (0700, the step user's) or a directory the recipe names."""
        from engine_adapter.sandbox.workdirs import step_dir

        return step_dir(self, run_id, declared).path

    def wrapper(self) -> list[str]:
        """What a command of a step starts through: the step user, and death with the bot."""
        if not self.setpriv:
            return []  # popen_kwargs() does it
        wrap = [self.setpriv]
        if self.user:
            wrap += ["--reuid", str(self.user[0]), "--regid", str(self.user[1]), "--clear-groups"]
        return [*wrap, "--pdeathsig", "KILL", "--"]

    def argv(
        self, argv: list[str], workdir: Path, *, mount: Mount | None = None, fit: Fit | None = None
    ) -> list[str]:
        """The command line that runs argv in the sandbox, killed when the bot dies. `mount`: the
        directory the step may write, held open (workdirs.opened); else workdir, by its path.
        `fit`: the command's network and limits (step_fit.py); without, no network at all."""
        outer, options, inner = (fit.outer, fit.options, fit.inner) if fit else ((), (), ())
        wrap = [*outer, *self.wrapper()]
        if not self.bwrap:
            return [*wrap, *inner, *argv]
        tmp = fit.tmp if fit else None
        # /tmp and /dev/shm on disk, under the runs root, where the step's tmp limit counts them
        # (a tmpfs is the machine's memory); a network namespace of its own always, so never the
        # host's loopback (step_network.py gives one that asked for it the network).
        scratch = ["--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
        if tmp:
            scratch = ["--bind", str(tmp / "tmp"), "/tmp", "--bind", str(tmp / "shm"), "/dev/shm"]
        args = [
            self.bwrap,
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--unshare-net",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            *scratch,
            # The host's sockets (a database's /run/postgresql, trusting its local users; a
            # bus) are not the step's: /run is its own, with only the resolver's settings kept
            # (/etc/resolv.conf may be a link into them).
            "--tmpfs",
            "/run",
            "--ro-bind-try",
            RESOLVER_DIR,
            RESOLVER_DIR,
            *options,
        ]
        # Order matters, later mounts cover earlier ones: the private home, then what is shared,
        # then what must stay hidden even inside a shared directory, then the step's own directory
        # (checked by workdirs.py never to hold a hidden path).
        args += _hide(self.private)
        for path in self.shared:
            args += ["--bind", str(path), str(path)]
        args += _hide(self.hidden)
        bind = mount.bwrap_args() if mount else ["--bind", str(workdir), str(workdir)]
        args += [*bind, "--chdir", str(workdir), "--"]
        return wrap + args + [*inner] + argv

    def step_sees(self, path: Path, workdir: Path) -> bool:
        """Whether `path` is visible to a step working in `workdir`, by the mounts argv() makes
        (the later cover the earlier): the workdir, over what is hidden, over what is shared,
        over the private home and bubblewrap's own /tmp, /dev, /proc and /run."""
        path = Path(os.path.normpath(path))

        def under(roots: Iterable[Path]) -> bool:
            return any(path == root or path.is_relative_to(root) for root in roots)

        if under([workdir]):
            return True
        if under(self.hidden):
            return False
        if under(self.shared):
            return True
        own = [Path(p) for p in ("/tmp", "/dev", "/proc", "/run")] if self.bwrap else []
        return not under([*self.private, *own])

    def popen_kwargs(self) -> RunAs:
        """Without setpriv, Python changes the user and sets the death signal (Popen runs
        preexec_fn after the user change, which would otherwise clear the signal)."""
        if self.setpriv:
            return {}
        from engine_adapter.sandbox.process_runner import die_with_parent

        kwargs: RunAs = {"preexec_fn": die_with_parent}
        if self.user:
            kwargs.update({"user": self.user[0], "group": self.user[1], "extra_groups": []})
        return kwargs


def _hide(paths: tuple[Path, ...]) -> list[str]:
    args: list[str] = []
    for path in paths:
        if path.is_dir():
            args += ["--tmpfs", str(path)]
        elif path.exists():
            args += ["--ro-bind", "/dev/null", str(path)]
    return args


def _paths(env_value: str | None, name: str) -> list[Path]:
    out = []
    for part in (env_value or "").split(":"):
        if part.strip():
            path = Path(part.strip()).expanduser()
            if not path.is_absolute():
                raise SandboxError(f"{name}: {part!r} is not an absolute path")
            out.append(path.resolve())
    return out


def default_runs_root() -> Path:
    """Outside $THREADLINE_HOME, so a step's `..` never reaches the credentials."""
    if os.environ.get(RUNS_DIR_ENV):
        return Path(os.environ[RUNS_DIR_ENV]).expanduser().resolve()
    if os.geteuid() == 0:
        return Path("/var/lib/threadline-runs")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state).expanduser().resolve() / "threadline" / "runs"


def hidden_paths(runs_root: Path) -> list[Path]:
    """Everything of Threadline's a step must not see: its home (credentials, logs), every run's
    directory (the step's own is bound back), the embedded server's data, the console's users
    file, and $THREADLINE_STEP_HIDE."""
    paths = [threadline_home().expanduser().resolve(), runs_root, VAR_LIB]
    paths += _paths(os.environ.get(USERS_FILE_ENV), USERS_FILE_ENV)
    paths += _paths(os.environ.get(HIDE_ENV), HIDE_ENV)
    seen: list[Path] = []
    for path in paths:
        if path != Path("/") and path not in seen:
            seen.append(path)
    return seen


def step_user_ids() -> tuple[int, int]:
    """The dedicated unprivileged user steps run as when Threadline runs as root (created once)."""
    try:
        pw = pwd.getpwnam(STEP_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                STEP_USER,
            ],
            capture_output=True,
            check=False,
        )
        try:
            pw = pwd.getpwnam(STEP_USER)
        except KeyError:
            raise SandboxError(
                f"could not create the system user {STEP_USER!r} that steps run as (useradd failed)"
            ) from None
    return pw.pw_uid, pw.pw_gid


def _check_reachable(path: Path, user: tuple[int, int]) -> None:
    """The step user must reach a directory it is to use: every parent traversable."""
    existing = path
    while not existing.exists():
        existing = existing.parent
    probe = subprocess.run(
        ["test", "-x", str(existing)],
        user=user[0],
        group=user[1],
        extra_groups=[],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        raise SandboxError(
            f"{path} is not reachable by the user {STEP_USER} that steps run as "
            f"(a directory on the way to {existing} is not traversable): choose "
            f"another place, or make its parents traversable (chmod o+x)"
        )


@cache
def bwrap_works(binary: str, user: tuple[int, int] | None) -> bool:
    """Whether bubblewrap can make a sandbox here (as the step user, when there is one):
    installed is not enough where user namespaces are disabled."""
    kwargs: RunAs = {}
    if user:
        kwargs = {"user": user[0], "group": user[1], "extra_groups": []}
    try:
        probe = subprocess.run(
            [
                binary,
                "--ro-bind",
                "/",
                "/",
                "--unshare-pid",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--tmpfs",
                "/tmp",
                "true",
            ],
            capture_output=True,
            timeout=20,
            cwd="/",
            check=False,
            **kwargs,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    if probe.returncode != 0:
        log.warning(
            "bubblewrap is installed but cannot make a sandbox: %s",
            probe.stderr.decode(errors="replace").strip(),
        )
    return probe.returncode == 0


def detect() -> Sandbox:
    """The strongest sandbox this machine allows, or the one $THREADLINE_SANDBOX names (refused
    when it cannot be had: asking for a sandbox and silently getting none would be worse)."""
    wanted = os.environ.get(SANDBOX_ENV, "auto").strip().lower() or "auto"
    if wanted not in ("auto", *MODES):
        raise SandboxError(f"{SANDBOX_ENV}={wanted!r}: must be auto, {', '.join(MODES)}")
    runs_root = default_runs_root()
    home = threadline_home().expanduser().resolve()
    if runs_root == home or runs_root.is_relative_to(home):
        raise SandboxError(
            f"{RUNS_DIR_ENV}={runs_root} lies inside THREADLINE_HOME ({home}), "
            "where the credentials are: choose a directory outside it"
        )
    from engine_adapter.sandbox import workdirs  # it builds on this module

    shared = _paths(os.environ.get(STEP_DIRS_ENV), STEP_DIRS_ENV)
    workdirs.check_step_dirs(shared)  # what may never be shared, before whether it is reachable
    user = step_user_ids() if os.geteuid() == 0 and wanted != "none" else None
    if user:
        for path in (runs_root, *shared):
            _check_reachable(path, user)
    binary = shutil.which("bwrap") if wanted in ("auto", "bwrap") else None
    if binary and not bwrap_works(binary, user):
        binary = None
    if wanted == "bwrap" and binary is None:
        raise SandboxError(
            f"{SANDBOX_ENV}=bwrap, but bubblewrap is not installed or cannot make "
            "a sandbox here (user namespaces disabled?)"
        )
    if wanted == "user" and user is None:
        raise SandboxError(f"{SANDBOX_ENV}=user needs Threadline to run as root")
    hidden = hidden_paths(runs_root)
    for path in hidden:
        if path != runs_root and runs_root.is_relative_to(path):
            raise SandboxError(
                f"{RUNS_DIR_ENV}={runs_root} lies inside {path}, which steps may not "
                "see: choose a directory outside Threadline's own files"
            )
    for path in shared:
        if any(path == h or path.is_relative_to(h) for h in hidden):
            raise SandboxError(
                f"{STEP_DIRS_ENV}: {path} lies inside Threadline's own files, "
                "which steps may not see"
            )
    # The account's home (keys, tokens, shell history) is private unless shared explicitly.
    private = [Path.home().resolve()] if Path.home().resolve() != Path("/") else []
    box = Sandbox(
        bwrap=binary,
        user=user,
        runs_root=runs_root,
        shared=tuple(shared),
        hidden=tuple(hidden),
        private=tuple(private),
    )
    forbidden = workdirs.forbidden_paths(box)
    allowed = workdirs.allowed_workdirs(os.environ.get(workdirs.WORKDIRS_ENV), forbidden)
    return replace(box, forbidden=forbidden, workdirs=allowed)
