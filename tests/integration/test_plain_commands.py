"""A bot starts a plain command's program without bash, in the sandbox, and anything else through
bash, as before. A `bash` first on the bots' PATH says when it is used."""

from __future__ import annotations

import os

from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

FAKE_BASH = """#!/bin/sh
echo "through bash" >&2
exec /bin/bash "$@"
"""


def test_a_plain_command_skips_bash_and_the_rest_still_use_it(conn, apply, procs, tmp_path):
    fake_bin = tmp_path / "fake-bin"  # in the tests' shared step directory: steps see it
    fake_bin.mkdir(mode=0o755)
    (fake_bin / "bash").write_text(FAKE_BASH)
    (fake_bin / "bash").chmod(0o755)
    apply("""
slug: plain-or-not
steps:
  - id: plain
    run_command: env
  - id: shell
    run_command: echo "{{payload.word}}" && pwd
""")
    procs.start("conductor")
    procs.start("bots", env={"PATH": f"{fake_bin}:{os.environ['PATH']}"})
    run_id = spawn(conn, "plain-or-not", {"word": "hello"}).run_id
    steps = harness.wait_for_state(procs.url, run_id, "completed")["steps"]
    plain, shell = (s["output"] for s in steps)
    workdir = procs.home / "runs" / run_id
    assert "through bash" not in plain
    lines = set(plain.splitlines())
    # What bash would have given it: the directory, the shell level, the program as found.
    assert {f"PWD={workdir}", "SHLVL=0", f"HOME={workdir}"} <= lines
    assert any(line.startswith("_=/") and line.endswith("/env") for line in lines)
    assert "through bash" in shell and "hello" in shell and str(workdir) in shell
