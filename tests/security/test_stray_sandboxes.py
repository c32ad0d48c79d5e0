"""A sandbox its bots process left behind ends at the next bots process's start.

bubblewrap's init waits for its outer process to let it go on, and only then asks to die with it;
a bots process SIGKILLed in between takes the outer one with it (it dies with its bots process)
and leaves the init waiting for ever, or a moment later running its command with no one to end
it. The moment is too short to hit on purpose, so each sandbox here is one in that state: a real
bubblewrap with its /tmp bound from a directory named for its bots process (as Guard.open names
it), run with no one to end it. The next bots process ends those whose bots process is gone or
whose pid another process now holds, and leaves a living bots process's own."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from engine_adapter.sandbox.sandbox import detect
from engine_adapter.sandbox.step_guard import TMP_DIR
from engine_adapter.testing import harness
from tests.security.test_step_limits import _bwrap_or_skip as needs_bwrap  # noqa: F401 (fixture)
from tests.security.test_step_limits import processes_named

pytestmark = pytest.mark.usefixtures("needs_bwrap")


def left_sandbox(tmp_root: Path, owner: int, marker: str) -> subprocess.Popen[bytes]:
    """A bubblewrap sandbox running a shell (`marker` its $0), its /tmp in a directory named for
    pid `owner`, in a session of its own; this test's process ends it (its init dies with it)."""
    scratch = tmp_root / f"{owner}-{uuid.uuid4().hex[:12]}"
    (scratch / "tmp").mkdir(parents=True)
    bwrap = detect().bwrap
    assert bwrap
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev"]
    argv += ["--proc", "/proc", "--bind", str(scratch / "tmp"), "/tmp"]
    argv += ["--", "sh", "-c", "sleep 600; :", marker]
    proc = subprocess.Popen(argv, start_new_session=True)
    harness.wait_for(lambda: len(processes_named(marker)) >= 3, timeout=10, what="the sandbox")
    return proc


def test_sandboxes_left_by_a_gone_bots_process_end_at_the_next_start(procs):
    tmp_root = procs.home / "runs" / TMP_DIR
    ended = subprocess.Popen(["true"])
    ended.wait()  # its pid is free: the bots process that was there is gone
    bystander = subprocess.Popen(["sleep", "600"])  # holds a pid, is no sandbox's ancestor
    marks = {name: f"stray-{name}-{uuid.uuid4().hex}" for name in ("gone", "taken", "living")}
    sandboxes = [
        left_sandbox(tmp_root, ended.pid, marks["gone"]),
        left_sandbox(tmp_root, bystander.pid, marks["taken"]),
        # This test's process started it: its bots process lives and is its ancestor.
        left_sandbox(tmp_root, os.getpid(), marks["living"]),
    ]
    try:
        procs.start("bots", wait=True)
        for name in ("gone", "taken"):
            harness.wait_for(
                lambda n=name: not processes_named(marks[n]),
                timeout=15,
                what=f"the sandbox of a bots process {name} to end",
            )
        assert len(processes_named(marks["living"])) >= 3, "a living bots process's sandbox ended"
        said = (procs.home / "bots.log").read_text()
        assert re.search(r"ended \d+ sandbox processes left by a bots process that is gone", said)
    finally:
        for proc in [*sandboxes, bystander]:
            proc.kill()
            proc.wait()
