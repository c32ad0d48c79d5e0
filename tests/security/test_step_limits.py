"""Limits per step, tried as a recipe's author would, through real bots running real steps: a fork
bomb, a memory bomb and a disk fill each fail their step with the limit named, while a run beside
them forks, writes and allocates normally and completes, and nothing of theirs is left on the
host; CPU time, one big allocation, one big file and the output have their limits too; /tmp is on
disk under the runs root; a recipe cannot ask past the bots host's ceilings; and health says how
the limits are enforced."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from engine_adapter.recipes.recipes import RecipeError, load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.sandbox.sandbox import detect
from engine_adapter.sandbox.step_guard import TMP_DIR
from engine_adapter.testing import harness

REQUIRE_ENV = "THREADLINE_REQUIRE_SANDBOX"  # set by CI: a missing bubblewrap fails, not skips


@pytest.fixture(name="needs_bwrap")
def _bwrap_or_skip() -> None:
    """Per-step process limits and a /tmp of the step's own need bubblewrap."""
    if detect().bwrap is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"bubblewrap cannot make a sandbox here, and {REQUIRE_ENV}=1")
        pytest.skip("bubblewrap cannot make a sandbox here (apt-get install bubblewrap)")


def recipe(slug: str, command: str, limits: dict[str, Any] | None = None, **step: Any) -> str:
    doc: dict[str, Any] = {"slug": slug, "steps": [{"id": "a", "run_command": command, **step}]}
    if limits:
        doc["limits"] = limits
    return json.dumps(doc)


def processes_named(marker: str) -> list[int]:
    """Live processes whose command line holds marker."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                if (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def failed_with(procs: harness.ProcessSet, run_id: str, named: str) -> str:
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=90)
    step = view["steps"][0]
    assert named in step["output"], step["output"]
    if "reached" in named:  # the limit is the step's reason too
        assert named in (step["reason"] or ""), step
    return step["output"]


def test_bombs_fail_their_steps_while_a_neighbour_completes(
    needs_bwrap, conn, apply, procs, tmp_path
):
    marker = f"bomb-{uuid.uuid4().hex[:10]}"
    go, forked = tmp_path / "go", tmp_path / "forked"
    apply(
        recipe(
            "fork-bomb",
            f"for i in $(seq 300); do (exec -a {marker} sleep 120) & done 2>/dev/null; wait",
            {"pids": 16},
            timeout="90s",
        )
    )
    hold = "x = b'x' * (40 << 20); import time; time.sleep(120)"
    apply(
        recipe(
            "memory-bomb",
            f'for i in 1 2 3 4; do (exec -a {marker} python3 -c "{hold}") & done; wait',
            {"memory": "64MiB"},
            timeout="90s",
        )
    )
    apply(
        recipe(
            "disk-fill",
            "for i in $(seq 100); do head -c 1M /dev/zero > /tmp/f$i; done; sleep 120",
            {"tmp": "32MiB"},
            timeout="90s",
        )
    )
    # The neighbour waits until the fork bomb is at its cap, then forks, writes and allocates.
    apply(
        recipe(
            "neighbour",
            f"while [ ! -e {go} ]; do sleep 0.02; done\n"
            f"for i in $(seq 10); do sleep 1 & done; : > {forked}; wait\n"
            "head -c 8M /dev/zero > /tmp/n && python3 -c \"x = b'x' * (32 << 20)\" && echo ok",
            timeout="90s",
        )
    )
    procs.start("conductor")
    procs.start("bots", wait=True)  # 4 slots: all four run at once
    neighbour = spawn(conn, "neighbour").run_id
    bombs = {slug: spawn(conn, slug).run_id for slug in ("fork-bomb", "memory-bomb", "disk-fill")}
    harness.wait_for(
        lambda: len(processes_named(f"{marker}\x00120")) >= 10, timeout=30, what="the fork bomb"
    )
    go.touch()
    harness.wait_for(forked.exists, timeout=30, what="the neighbour to fork")
    assert processes_named(f"{marker}\x00120"), "the fork bomb ended before the neighbour forked"
    failed_with(procs, bombs["fork-bomb"], "pids limit 16 processes reached")
    failed_with(procs, bombs["memory-bomb"], "memory limit 64 MiB reached")
    failed_with(procs, bombs["disk-fill"], "tmp limit 32 MiB reached")
    view = harness.wait_for_state(procs.url, neighbour, "completed", timeout=90)
    assert view["steps"][0]["output"].strip() == "ok"
    # The host: nothing of theirs runs on, their /tmp directories are gone (the neighbour's
    # stays with its run's kept sandbox until that ends), the bots are well.
    harness.wait_for(lambda: not processes_named(marker), timeout=15, what="the bombs to be gone")
    scratch = procs.home / "runs" / TMP_DIR
    harness.wait_for(
        lambda: all((left / "tmp" / "n").exists() for left in scratch.iterdir()),
        timeout=15,
        what="their /tmp to go",
    )
    health = json.loads(harness.run_cli(procs.url, "health", "--json").stdout)
    assert health["status"] == "ok" and all(b["alive"] for b in health["bots"]), health


def test_one_allocation_past_the_memory_limit_fails_its_step(needs_bwrap, conn, apply, procs):
    """The recipe's limit, and a step's own over it."""
    grab = "python3 -c \"x = b'x' * (100 << 20); print('held', len(x) >> 20)\""
    apply(
        json.dumps(
            {
                "slug": "grabs",
                "limits": {"memory": "64MiB"},
                "steps": [
                    {"id": "small", "run_command": grab, "on_failure": "continue"},
                    {"id": "large", "run_command": grab, "limits": {"memory": "256MiB"}},
                ],
            }
        )
    )
    procs.start("conductor")
    procs.start("bots")
    view = harness.wait_for_state(procs.url, spawn(conn, "grabs").run_id, "completed", timeout=60)
    small, large = view["steps"]
    assert small["status"] == "failed" and "memory limit 64 MiB reached" in small["output"]
    assert "held" not in small["output"]
    assert large["status"] == "completed" and large["output"].strip() == "held 100"


def test_tmp_is_on_disk_and_a_file_past_the_limit_fails_its_step(
    needs_bwrap, conn, apply, procs, tmp_path
):
    """/tmp and /dev/shm are directories under the runs root (not the machine's memory), the
    step's own, removed when it ends."""
    seen = tmp_path / "seen"
    apply(
        recipe(
            "writes",
            f"echo here > /tmp/mine; echo shm > /dev/shm/mine; : > {seen}; sleep 3\n"
            "head -c 64M /dev/zero > /tmp/big && echo wrote",
            {"tmp": "32MiB"},
        )
    )
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "writes").run_id
    harness.wait_for(seen.exists, timeout=30, what="the step to write its /tmp")
    scratch = procs.home / "runs" / TMP_DIR
    (step_tmp,) = scratch.iterdir()
    assert (step_tmp / "tmp" / "mine").read_text() == "here\n"
    assert (step_tmp / "shm" / "mine").read_text() == "shm\n"
    out = failed_with(procs, run_id, "tmp limit 32 MiB reached")
    assert "wrote" not in out.split()
    harness.wait_for(lambda: not step_tmp.exists(), timeout=15, what="its /tmp to go")


def test_cpu_time_past_the_limit_fails_its_step(needs_bwrap, conn, apply, procs):
    apply(recipe("spins", "python3 -c 'while True: pass'", {"cpu": "2s"}, timeout="60s"))
    procs.start("conductor")
    procs.start("bots")
    failed_with(procs, spawn(conn, "spins").run_id, "cpu limit 2s reached")


def test_output_past_the_limit_is_dropped_and_said(needs_bwrap, conn, apply, procs):
    apply(recipe("talks", "head -c 5000 /dev/zero | tr '\\0' x", {"output": "1KiB"}))
    procs.start("conductor")
    procs.start("bots")
    view = harness.wait_for_state(procs.url, spawn(conn, "talks").run_id, "completed")
    out = view["steps"][0]["output"]
    assert out.startswith("x" * 1024) and "x" * 1025 not in out
    assert "[3976 more bytes of output dropped]" in out


def test_bad_limits_are_refused_with_their_path(conn, apply):
    bad = {
        "limits": {"memory": "5MB", "pidz": 3, "pids": 2, "cpu": "soon", "tmp": True},
        "steps": [
            {"id": "a", "run_command": "ls", "limits": {"output": "1TiB"}},
            {"id": "b", "sleep": "1s", "limits": {"pids": 8}},
        ],
    }
    with pytest.raises(RecipeError) as err:
        apply(json.dumps({"slug": "bad", **bad}))
    problems = "\n".join(err.value.errors)
    for expected in (
        'limits.memory: "5MB" is not a size',
        "limits.pidz: unknown limit (known: memory, pids, cpu, tmp, output)",
        "limits.pids: 2 must be from 4 processes to 1048576 processes",
        'limits.cpu: "soon" is not a duration',
        "limits.tmp: true is not a size",
        'steps[0].limits.output: "1TiB" must be from 1 KiB to 64 MiB',
        "steps[1].limits: not allowed on a sleep step",
    ):
        assert expected in problems, problems
    assert conn.execute("select count(*) as n from threadline.workflows").fetchone()["n"] == 0
    canonical = load_recipe_text(recipe("ok", "ls", {"memory": "1G", "pids": 64, "cpu": 90}))
    assert canonical.to_dict()["limits"] == {"memory": "1GiB", "pids": 64, "cpu": "1m30s"}


def test_a_recipe_cannot_ask_past_the_hosts_ceiling(needs_bwrap, conn, apply, procs, tmp_path):
    ran = tmp_path / "ran"
    apply(recipe("greedy", f": > {ran}", {"memory": "2GiB"}))
    procs.start("conductor")
    procs.start("bots", env={"THREADLINE_STEP_LIMITS_MAX": "memory=128MiB"})
    failed_with(
        procs,
        spawn(conn, "greedy").run_id,
        "limits.memory 2 GiB is above this bots host's ceiling, 128 MiB "
        "(THREADLINE_STEP_LIMITS_MAX)",
    )
    assert not ran.exists()


def test_health_says_how_limits_are_enforced(conn, procs):
    procs.start("conductor", wait=True)
    procs.start("bots", env={"THREADLINE_STEP_LIMITS": "pids=100"}, wait=True)
    health = json.loads(harness.run_cli(procs.url, "health", "--json").stdout)
    said = health["bots"][0]["sandbox"]
    assert "limits through cgroup v2" in said or "limits through rlimits" in said, said
    assert "pids 100 processes" in said and "memory 1 GiB" in said, said
    text = harness.run_cli(procs.url, "health").stdout
    assert "limits through" in text
