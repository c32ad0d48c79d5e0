"""scripts/install.sh (which scripts/run.sh calls on every start) installs only when what the
install depends on changed: real bash, a real venv, in a copy of the project's files."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _install(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "THREADLINE_REINSTALL"}
    return subprocess.run(
        ["bash", "scripts/install.sh", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _as_installed(project: Path, target: str) -> None:
    """What a successful install leaves: the entry point, and the stamp naming what it used."""
    deps = hashlib.sha256(
        (project / "pyproject.toml").read_bytes() + (project / "scripts/install.sh").read_bytes()
    ).hexdigest()
    (project / ".venv/installed").write_text(f"{deps} {target}\n")
    entry = project / ".venv/bin/threadline"
    entry.write_text("#!/bin/sh\n")
    entry.chmod(0o755)


def test_install_runs_only_when_its_dependencies_changed(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", project)
    shutil.copy(ROOT / "scripts/install.sh", project / "scripts")
    # A venv without pip: an install that is attempted fails at once, without the network.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", project / ".venv"], check=True)

    first = _install(project)
    assert "installing Threadline" in first.stdout and first.returncode == 1
    assert not (project / ".venv/installed").exists()  # a failed install leaves no stamp

    _as_installed(project, ".")
    again = _install(project)
    assert again.returncode == 0, again.stderr
    assert "not reinstalling" in again.stdout and "installing Threadline" not in again.stdout

    tests = _install(project, "test")  # the test tools are not in a plain install
    assert "installing Threadline" in tests.stdout

    _as_installed(project, ".[test]")
    assert "not reinstalling" in _install(project).stdout  # the test install serves run.sh too

    with open(project / "pyproject.toml", "a") as f:
        f.write("\n# a changed dependency\n")
    changed = _install(project)
    assert "installing Threadline" in changed.stdout
