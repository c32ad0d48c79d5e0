"""A sandbox kept for one run's commands (THREADLINE_STEP_SANDBOX_KEEP=on, kept_sandbox.py): the
run's steps share it, and what a step is promised still holds against a hostile command: nothing
outlives its command, the loop that starts them is out of reach, another run never shares it,
and a command that times out, passes a limit or kills the loop ends it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from engine_adapter.model.errors import Invalid
from engine_adapter.runs.spawn import spawn
from engine_adapter.sandbox import kept_sandbox, step_network, workdirs
from engine_adapter.sandbox.process_runner import ProcessResult
from engine_adapter.sandbox.sandbox import Sandbox, detect
from engine_adapter.sandbox.step_guard import process_tree
from engine_adapter.testing import harness

# Limits through rlimits: a kept sandbox is not used where they go through cgroup v2.
KEEP = {kept_sandbox.KEEP_ENV: "on", "THREADLINE_STEP_LIMITS_VIA": "rlimit"}
# The sandbox's identity: its PID namespace, which no two living sandboxes share, and its init's
# start time, which tells apart a sandbox from a later one that was given a freed namespace number.
# (The start time alone counts in clock ticks: two runs' sandboxes started in one tick share it.)
SANDBOX_ID = "echo sandbox $(readlink /proc/self/ns/pid) $(cut -d' ' -f22 /proc/1/stat)"


@pytest.fixture(name="box")
def _box(tmp_path, monkeypatch) -> Iterator[Sandbox]:
    monkeypatch.setenv("THREADLINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("THREADLINE_RUNS_DIR", str(tmp_path / "runs"))
    for name, value in KEEP.items():
        monkeypatch.setenv(name, value)
    tmp_path.chmod(0o711)
    box = detect()
    if not kept_sandbox.usable(box):
        pytest.skip(f"no sandbox can be kept here (steps run {box.describe()})")
    yield box
    kept_sandbox.end_all()


def run(
    box: Sandbox,
    command: str,
    run_id: str = "run-1",
    env: dict[str, str] | None = None,
    limits: dict[str, float] | None = None,
    timeout_s: float = 30,
    network: bool = False,
    argv: list[str] | None = None,
) -> ProcessResult:
    step = workdirs.step_dir(box, run_id, None)
    result = kept_sandbox.run(
        box,
        run_id,
        step,
        limits or {},
        network,
        box.runs_root / run_id,
        argv or ["bash", "-c", command],
        {"PATH": "/usr/bin:/bin", **(env or {})},
        timeout_s=timeout_s,
        on_start=lambda pgid: None,
        on_output=lambda text: None,
        should_continue=lambda: True,
    )
    assert result is not None
    return result


def sandbox_of(result: ProcessResult | str) -> str:
    text = result if isinstance(result, str) else result.output
    return next(line for line in text.splitlines() if line.startswith("sandbox "))


def test_a_runs_commands_share_a_sandbox_and_leave_nothing_running(box):
    first = run(
        box,
        f"{SANDBOX_ID}; (setsid sleep 300 &); sleep 301 & echo MINE=$MINE; exit 3",
        env={"MINE": "first"},
    )
    assert first.exit_code == 3 and "MINE=first" in first.output
    second = run(
        box,
        f"{SANDBOX_ID}; echo MINE=${{MINE-unset}}; "
        "grep -l sleep /proc/[0-9]*/comm | wc -l | sed 's/^/sleeping: /'",
    )
    assert sandbox_of(second) == sandbox_of(first)
    assert "MINE=unset" in second.output  # no command's environment reaches the next
    assert "sleeping: 0" in second.output  # the first's children, setsid's too, are gone


def test_a_command_gets_the_environment_it_was_given_and_no_other(box):
    """The loop's own exported names (its PWD, SHLVL, PATH) never reach a command."""
    run(box, "true")  # the run's sandbox, started
    result = run(box, "", argv=["/usr/bin/env"], env={"MINE": "x y"})
    assert sorted(result.output.splitlines()) == ["MINE=x y", "PATH=/usr/bin:/bin"], result.output


def test_a_plain_command_gets_what_bash_would_give_it(box):
    """A plain command (plain_command.py) gets what bash -c would have given it, `_` (the
    program as found) included, which bash's exec never passes on."""
    step = workdirs.step_dir(box, "run-1", None)
    given = {"PWD": str(step.path), "SHLVL": "0", "_": "/usr/bin/env"}
    plain = run(box, "", argv=["env"], env=given)
    expected = {"PATH=/usr/bin:/bin", *(f"{k}={v}" for k, v in given.items())}
    assert set(plain.output.splitlines()) == expected, plain.output


def test_names_bash_reads_reach_the_command_as_they_were_given(box):
    """The loop's bash never exports a command's environment itself: it would read some names
    as it did (a locale it warns of, readonly options, arithmetic where a $(…) runs)."""
    given = {
        "LC_ALL": "nowhere.UTF-8",
        "SHELLOPTS": "xtrace",
        "BASHOPTS": "extglob",
        "RANDOM": "1 x",
        "OPTIND": "a[$(echo evaluated >&2)]",
        "SECONDS": "forty",
    }
    out = run(box, "", argv=["/usr/bin/env"], env=given).output
    assert set(out.splitlines()) == {"PATH=/usr/bin:/bin", *(f"{k}={v}" for k, v in given.items())}


def test_a_command_killed_by_a_signal_says_nothing_of_the_loop(box):
    """Its output is its own: the loop's bash reporting the signal ("Terminated") is not."""
    killed = run(box, "echo mine; kill -TERM $$")
    assert killed.exit_code == 128 + 15 and killed.output == "mine\n", killed
    assert run(box, "echo next").output == "next\n"


def test_the_loop_is_out_of_its_commands_reach(box):
    """The loop runs from a bash the step user may execute and not read: the kernel makes it
    non-dumpable, so no command may open its descriptors to forge a request or an answer."""
    out = run(
        box,
        "ls /proc/2/fd >/dev/null 2>&1 && echo OPEN || echo refused; "
        "cat /proc/2/environ >/dev/null 2>&1 && echo OPEN || echo refused",
    ).output
    assert out.split() == ["refused", "refused"], out


def test_a_command_that_kills_the_loop_ends_the_sandbox(box):
    before = sandbox_of(run(box, SANDBOX_ID))
    killed = run(box, "kill -9 2; sleep 2; echo survived")
    assert "survived" not in killed.output and killed.exit_code != 0
    assert sandbox_of(run(box, SANDBOX_ID)) != before  # a new one serves the next


def test_a_command_that_times_out_ends_the_sandbox(box):
    before = sandbox_of(run(box, SANDBOX_ID))
    late = run(box, "sleep 30", timeout_s=1)
    assert late.timed_out
    assert sandbox_of(run(box, SANDBOX_ID)) != before


def test_another_run_never_shares_it(box):
    mine = run(box, f"{SANDBOX_ID}; echo mine > /tmp/left-here", run_id="run-a")
    other = run(box, f"{SANDBOX_ID}; cat /tmp/left-here 2>&1 || echo not here", run_id="run-b")
    assert sandbox_of(other) != sandbox_of(mine)
    assert "not here" in other.output and "mine" not in other.output.split()


def test_a_limit_holds_in_a_kept_sandbox_and_ends_it(box):
    before = sandbox_of(run(box, SANDBOX_ID, limits={"pids": 12}))
    bomb = "for i in $(seq 100); do sleep 30 & done 2>/dev/null; wait"
    hit = run(box, bomb, limits={"pids": 12})
    assert hit.limit is not None and "pids" in hit.limit, hit
    assert sandbox_of(run(box, SANDBOX_ID, limits={"pids": 12})) != before


def test_a_networked_run_keeps_its_network_with_its_sandbox(box):
    """slirp4netns is attached once, when the sandbox starts, and serves each command in it."""
    if step_network.slirp4netns() is None:
        pytest.skip("slirp4netns is not installed")
    probe = f"{SANDBOX_ID}; grep -c tap0 /proc/net/dev | sed 's/^/tap: /'"
    first, second = (run(box, probe, network=True) for _ in range(2))
    assert sandbox_of(first) == sandbox_of(second)
    assert "tap: 1" in first.output and "tap: 1" in second.output, (first, second)
    offline = run(box, probe)  # another fitting of the same run: a sandbox of its own
    assert sandbox_of(offline) != sandbox_of(first) and "tap: 0" in offline.output


def test_ended_sandboxes_leave_no_descriptor_or_process_behind(box):
    """Networked ones too: their slirp4netns and pipes go with them."""
    network = step_network.slirp4netns() is not None
    run(box, "true", run_id="warm", network=network)
    kept_sandbox.end_all()
    before = len(os.listdir("/proc/self/fd"))
    for n in range(6):
        run(box, "true", run_id=f"run-{n}", network=network)
    assert len(os.listdir("/proc/self/fd")) > before  # the six sandboxes hold theirs
    kept_sandbox.end_all()
    assert len(os.listdir("/proc/self/fd")) <= before
    harness.wait_for(
        lambda: not running_descendants(), timeout=10, what="the sandboxes' processes to end"
    )


def running_descendants() -> list[int]:
    """This process's descendants still running (zombies aside)."""
    me = os.getpid()
    return [pid for pid, fields in process_tree(me) if pid != me and fields[0] != "Z"]


def test_a_sandbox_idle_too_long_ends(box, monkeypatch):
    before = sandbox_of(run(box, SANDBOX_ID))
    assert sandbox_of(run(box, SANDBOX_ID)) == before
    monkeypatch.setattr(kept_sandbox, "KEEP_IDLE_S", 0.0)
    kept_sandbox.end_idle()  # as an idle bot slot does
    monkeypatch.setattr(kept_sandbox, "KEEP_IDLE_S", 30.0)
    assert sandbox_of(run(box, SANDBOX_ID)) != before


def test_a_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv(kept_sandbox.KEEP_ENV, "sometimes")
    with pytest.raises(Invalid, match=kept_sandbox.KEEP_ENV):
        kept_sandbox.enabled()


def test_a_workflows_steps_share_their_runs_sandbox(conn, apply, procs):
    """Through a bots process: three steps of a run in one sandbox, a child left by the first
    gone before the second starts; another run in another sandbox."""
    if detect().bwrap is None:
        pytest.skip("bubblewrap cannot make a sandbox here")
    probe = f"{SANDBOX_ID}; grep -l sleep /proc/[0-9]*/comm | wc -l | sed 's/^/sleeping: /'"
    steps = [
        {"id": "a", "run_command": f"{probe}; (setsid sleep 300 &)"},
        {"id": "b", "run_command": probe},
        {"id": "c", "run_command": probe},
    ]
    apply(json.dumps({"slug": "shares", "network": False, "steps": steps}))
    procs.start("conductor")
    procs.start("bots", env=KEEP)
    runs = [spawn(conn, "shares").run_id for _ in range(2)]
    outputs = []
    for run_id in runs:
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
        outputs.append([step["output"] for step in view["steps"]])
    for outs in outputs:
        ids = {sandbox_of(out) for out in outs}
        assert len(ids) == 1, outs  # one sandbox served the run's three steps
        assert all("sleeping: 0" in out for out in outs), outs
    assert sandbox_of(outputs[0][0]) != sandbox_of(outputs[1][0])
