"""A step's network: every command in bubblewrap runs in a network namespace of its own, so it
never reaches the host's loopback (the database, the webhook ingress, the console, anything bound
to 127.0.0.1) nor sees the host's sockets (/proc/net/tcp shows its own).

- `network: false`: the namespace has only its own loopback: no network at all.
- `network: true` (the default): slirp4netns gives the namespace a tap device and outbound
  access through the host's network stack, with the host's loopback refused
  (--disable-host-loopback); the step reaches what any machine on the network could reach, the
  host's own non-loopback addresses included. DNS goes through slirp4netns (10.0.2.3).
- slirp4netns missing: such a step gets no network (not the host's), the bots process's log and
  `health` say so, and a step that fails says it ran without the network.

The handshake: bubblewrap writes its namespace's first process to --info-fd and waits on
--block-fd; the bot starts slirp4netns (as the step user, in the user namespace that owns the
network namespace), waits until it reports the interface up, then lets the command start.
slirp4netns ends with the command (its --exit-fd closes), or with the bots process.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import IO

from engine_adapter.sandbox.afterwards import later
from engine_adapter.sandbox.readable import readable
from engine_adapter.sandbox.sandbox import Sandbox, SandboxError

SLIRP = "slirp4netns"
TAP = "tap0"
DNS = "10.0.2.3"  # slirp4netns's resolver, which forwards to the host's
READY_S = 10.0
LOOPBACK_S = 2.0
_NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace


class NetworkError(SandboxError):
    """The step's network could not be set up; the step does not run."""


@cache
def slirp4netns() -> str | None:
    return shutil.which(SLIRP)


def describe(box: Sandbox) -> str:
    """In words, for `health`, `up` and the console."""
    if not box.bwrap:
        return "network: the host's, loopback included (needs bubblewrap)"
    if slirp4netns() is None:
        return (
            "network: NONE for every step, network: true included "
            "(install slirp4netns: Debian apt-get install slirp4netns)"
        )
    return "network: a namespace per step, outbound through slirp4netns, no host loopback"


@cache
def _resolver_lines() -> str:
    kept = []
    try:
        for line in Path("/etc/resolv.conf").read_text().splitlines():
            if line.split()[:1] in (["search"], ["domain"], ["options"]):
                kept.append(line)
    except OSError:
        pass
    return "\n".join([f"nameserver {DNS}", *kept]) + "\n"


def resolv_conf(runs_root: Path) -> Path:
    """The resolv.conf a step with the network reads: slirp4netns's resolver, and the host's
    search domains (a host resolver on 127.0.0.53 would be the step's own loopback). Written
    once under the runs root, where bubblewrap (as the step user) can open it."""
    path = runs_root / ".net" / "resolv.conf"
    if not path.exists():
        path.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as f:
            f.write(_resolver_lines())
        os.chmod(f.name, 0o644)
        os.replace(f.name, path)
    return path


@dataclass
class Attachment:
    """One command's network: bubblewrap's options and descriptors, and the slirp4netns that
    serves it once the command's namespace exists."""

    box: Sandbox
    options: tuple[str, ...] = ()
    pass_fds: tuple[int, ...] = ()
    note: str | None = None  # said when the step fails: it ran without the network it wanted
    fds: dict[str, int] = field(default_factory=dict)
    slirp: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None

    def started(self, pid: int) -> None:
        """Called as soon as the command's process exists: connect its namespace, then let it
        run. NetworkError if slirp4netns cannot (the caller kills the command). Where
        bubblewrap gives up while making the sandbox, its output says why: nothing to connect."""
        if not self.fds:
            return
        for name in ("info_w", "block_r"):  # the command holds its own copies
            os.close(self.fds.pop(name))
        info = _read_all(self.fds["info_r"], READY_S)
        if not info and _ended(self.fds["info_r"]):
            return
        try:
            child = int(json.loads(info)["child-pid"])
        except (ValueError, KeyError, TypeError):
            raise NetworkError(
                f"bubblewrap did not say where the step runs ({info[:200]!r})"
            ) from None
        try:
            self._connect(child)
            os.write(self.fds["block_w"], b"1")  # the command starts (close() closes it)
        except OSError as err:
            # Its namespaces go before it ends, and a process that ended has none left.
            if not (isinstance(err, FileNotFoundError) or _gone(child)):
                raise NetworkError(f"the step's network could not be set up: {err}") from None

    def _connect(self, child: int) -> None:
        """Start slirp4netns for the namespace of bubblewrap's child, and wait until it is up."""
        net = os.open(f"/proc/{child}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.fds["net"] = net
        # The namespace's owner, from the network namespace itself: bubblewrap moves its child
        # into a nested user namespace soon after, which would not own the network.
        user = fcntl.ioctl(net, _NS_GET_USERNS)
        self.fds["user"] = user
        _wait_for_loopback(child, os.fstat(user).st_ino)
        ready_r, ready_w = os.pipe()
        exit_r, exit_w = os.pipe()
        self.fds.update(ready_r=ready_r, exit_w=exit_w)
        argv = [
            *self.box.wrapper(),
            slirp4netns() or SLIRP,
            "--configure",
            "--mtu=65520",
            "--disable-host-loopback",
            f"--ready-fd={ready_w}",
            f"--exit-fd={exit_r}",
            "--netns-type=path",
        ]
        if os.fstat(user).st_ino != os.stat("/proc/self/ns/user").st_ino:
            argv.append(f"--userns-path=/proc/self/fd/{user}")
        argv += [f"/proc/self/fd/{net}", TAP]
        self.log = tempfile.TemporaryFile()
        try:
            self.slirp = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                pass_fds=(ready_w, exit_r, net, user),
                cwd="/",
                **self.box.popen_kwargs(),
            )
        finally:
            os.close(ready_w)
            os.close(exit_r)
        if _read_all(ready_r, READY_S, want=1) != b"1":
            raise OSError(f"slirp4netns did not connect it: {self._said()}")

    def _said(self) -> str:
        if self.slirp is not None and self.slirp.poll() is None:
            return "it did not report the interface up in time"
        if self.log is None:
            return "it did not start"
        self.log.seek(0)
        return self.log.read()[-500:].decode(errors="replace").strip() or "no reason given"

    def close(self) -> None:
        exit_w = self.fds.pop("exit_w", None)
        if exit_w is not None:
            os.close(exit_w)  # slirp4netns ends
        if self.slirp is not None:
            # Its exit waits in the kernel for the tap device to go (some 30 ms, no CPU).
            later(partial(_reap, self.slirp))
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        if self.log is not None:
            self.log.close()


def _reap(slirp: subprocess.Popen[bytes]) -> None:
    try:
        slirp.wait(timeout=5)
    except subprocess.TimeoutExpired:  # its exit descriptor closed, yet it runs on
        slirp.kill()
        slirp.wait()


def _wait_for_loopback(child: int, owner: int) -> None:
    """Until bubblewrap has set up the namespace's loopback: slirp4netns brings `lo` up too, and
    bubblewrap, finding it done, would fail. Bubblewrap is past it once it has moved its child
    into the nested user namespace that it makes (with --dev, unprivileged), or once `lo` has
    its IPv6 address; a setuid bubblewrap without IPv6 shows neither, and gets a moment."""
    deadline = time.monotonic() + LOOPBACK_S
    while time.monotonic() < deadline:
        try:
            if os.stat(f"/proc/{child}/ns/user").st_ino != owner:
                return
            if " lo\n" in Path(f"/proc/{child}/net/if_inet6").read_text():
                return
        except OSError:
            return  # it has ended: nothing to wait for
        time.sleep(0.0005)


def _gone(pid: int) -> bool:
    """Whether a process has ended (a zombie has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _ended(fd: int) -> bool:
    """Whether a pipe's writers have all closed it."""
    return readable(fd, 0) and not os.read(fd, 1)


def _read_all(fd: int, timeout_s: float, want: int | None = None) -> bytes:
    """What fd gives until its end (or `want` bytes), within timeout_s."""
    out = b""
    deadline = time.monotonic() + timeout_s
    while want is None or len(out) < want:
        left = deadline - time.monotonic()
        if left <= 0 or not readable(fd, left):
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    return out


@contextmanager
def attached(box: Sandbox, wanted: bool) -> Iterator[Attachment]:
    """One command's network, set up when its process starts (Attachment.started) and taken
    down when it is done."""
    attachment = Attachment(box)
    if box.bwrap and wanted:
        if slirp4netns() is None:
            attachment.note = (
                "this step ran without the network: slirp4netns is not installed where its bot "
                "runs (Debian: apt-get install slirp4netns)"
            )
        else:
            info_r, info_w = os.pipe()
            block_r, block_w = os.pipe()
            attachment.fds.update(info_r=info_r, info_w=info_w, block_r=block_r, block_w=block_w)
            attachment.pass_fds = (info_w, block_r)
            resolv = resolv_conf(box.runs_root)
            attachment.options = (
                "--info-fd",
                str(info_w),
                "--block-fd",
                str(block_r),
                "--ro-bind",
                str(resolv),
                "/etc/resolv.conf",
            )
    try:
        yield attachment
    finally:
        attachment.close()
