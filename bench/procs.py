"""Conductor and bot processes started for the benchmark; every one is killed on the way out."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from engine_adapter import db, harness


class ProcessSet:
    def __init__(self, url: str, home: Path) -> None:
        self.url, self.home = url, home
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, kind: str) -> subprocess.Popen[bytes]:
        proc = harness.start_process(kind, self.url, self.home)
        self.procs.append(proc)
        return proc

    def wait_alive(self, kind: str, count: int = 1, timeout: float = 30.0) -> None:
        """Until `count` processes of `kind` hold their liveness lock (i.e. finished starting)."""
        with db.connect(self.url) as conn:
            harness.wait_for(lambda: harness.alive_count(conn, kind) >= count, timeout,
                             interval=0.02, what=f"{count} live {kind} process(es)")

    def sigkill(self, proc: subprocess.Popen[bytes]) -> None:
        harness.kill(proc, signal.SIGKILL)

    def kill_all(self) -> None:
        for proc in self.procs:
            try:
                harness.kill(proc)
            except subprocess.TimeoutExpired:  # keep going: the others must die too
                pass

    def log_tails(self, lines: int = 20) -> str:
        out = []
        for path in sorted(self.home.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(out)
