"""Control flow end to end, with real conductor and bot processes: conditions, if/then/else,
repeat, foreach (in turn and in parallel), parallel groups (all / any), sub-workflows and outputs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from engine_adapter.model.identity import Actor
from engine_adapter.read import engine_debug, step_tree
from engine_adapter.runs import commands
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness

OPERATOR = Actor("tester", "console")

CHECKS = """
slug: checks
outputs:
  verdict: steps.triage.output
  check_status: steps.checks.status
  alarm: outputs.alarm
steps:
  - id: checks
    run_command: echo "checking {{payload.target}}"; exit {{payload.code}}
    on_failure: continue
  - id: investigate
    if: steps.checks.status == "failed"
    run_command: echo "investigating exit $CODE" | sed "s/\\$CODE/{{steps.checks.exit_code}}/"
  - id: celebrate
    if: steps.checks.status == "completed"
    run_command: echo all good
  - id: triage
    if: steps.checks.exit_code > 1
    then:
      - id: page
        run_command: echo paging
        output: alarm
    else:
      - id: log
        run_command: echo logged
        output: alarm
  - id: report
    run_command: echo "alarm={{outputs.alarm}}"
"""


def statuses(view: dict) -> dict[str, str]:
    """Each step's status by id (branch and iteration headings left out)."""
    return {
        n["id"]: n["status"]
        for _, n in step_tree.flatten(view["steps"])
        if n["kind"] not in ("branch", "iteration")
    }


def node(view: dict, step_id: str) -> dict:
    return next(n for _, n in step_tree.flatten(view["steps"]) if n["id"] == step_id)


def test_conditions_branches_and_outputs(conn, apply, procs):
    apply(CHECKS)
    procs.start("conductor")
    procs.start("bots")
    failing = spawn(conn, "checks", {"target": "api", "code": 3}).run_id
    passing = spawn(conn, "checks", {"target": "api", "code": 0}).run_id

    view = harness.wait_for_state(procs.url, failing, "completed", timeout=60)
    assert statuses(view) == {
        "checks": "failed",
        "investigate": "completed",
        "celebrate": "skipped",
        "triage": "completed",
        "page": "completed",
        "log": "skipped",
        "report": "completed",
    }
    assert node(view, "celebrate")["reason"] == '`steps.checks.status == "completed"` is false'
    assert node(view, "triage")["output"] == "then"
    assert node(view, "report")["output"].strip() == "alarm=paging"
    assert view["outputs"] == {"verdict": "then", "check_status": "failed", "alarm": "paging"}
    texts = [e["text"] for e in view["thread"]]
    assert '`steps.checks.status == "failed"` is true, so step investigate runs.' in texts
    assert '`steps.checks.status == "completed"` is false, so step celebrate is skipped.' in texts
    assert "`steps.checks.exit_code > 1` is true, so step triage takes its then branch." in texts

    decisions = engine_debug.run_debug(conn, failing)["decisions"]
    assert {(d["what"], d["step"], d["value"]) for d in decisions} >= {
        ("condition", "investigate", 'True (`steps.checks.status == "failed"` is true)'),
        ("condition", "triage", "True (`steps.checks.exit_code > 1` is true)"),
    }
    view = harness.wait_for_state(procs.url, passing, "completed", timeout=60)
    assert statuses(view)["investigate"] == "skipped"
    assert statuses(view)["celebrate"] == "completed"
    assert node(view, "triage")["output"] == "else"
    assert node(view, "report")["output"].strip() == "alarm=logged"
    assert view["outputs"]["check_status"] == "completed"


def test_a_decision_is_taken_once_even_if_the_data_behind_it_changes(conn, apply, procs):
    """The condition reads the payload; the payload is changed under the run after the decision
    and the conductor is killed: the replay takes the same branch from the checkpoint."""
    apply("""
slug: once
steps:
  - id: pick
    if: payload.go == "left"
    then:
      - id: left
        run_command: sleep 2; echo left
    else:
      - id: right
        run_command: echo right
""")
    conductor = procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "once", {"go": "left"}).run_id
    harness.wait_for(
        lambda: db.fetch_one(conn, "get_run", dict(run_id=run_id))["current_step"] == "left",
        what="the left branch to start",
    )
    conn.execute(
        'update threadline.run_threads set payload = \'{"go": "right"}\' where run_id = %s',
        (run_id,),
    )
    conn.execute(
        "update absurd.t_threadline set params = jsonb_set(params, '{payload,go}', '\"right\"') "
        "where task_id = %s",
        (run_id,),
    )
    harness.kill(conductor)
    procs.start("conductor")
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert statuses(view) == {"pick": "completed", "left": "completed", "right": "skipped"}


REPEAT = """
slug: poll
steps:
  - id: poll
    repeat:
      - id: probe
        run_command: echo x >> {{payload.dir}}/tries && wc -l < {{payload.dir}}/tries
    until: int(steps.probe.output) >= 3
    max_iterations: 5
  - id: after
    run_command: echo "took {{steps.probe.output}}"
"""


def test_repeat_until(conn, apply, procs, tmp_path: Path):
    apply(REPEAT)
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "poll", {"dir": str(tmp_path)}).run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert (tmp_path / "tries").read_text().count("x") == 3
    poll = node(view, "poll")
    assert [it["n"] for it in poll["iterations"]] == [1, 2, 3]
    assert [it["steps"][0]["path"] for it in poll["iterations"]] == [
        "poll[1]/probe",
        "poll[2]/probe",
        "poll[3]/probe",
    ]
    assert node(view, "after")["output"].strip() == "took 3"


def test_repeat_that_never_ends_fails_at_max_iterations(conn, apply, procs, tmp_path: Path):
    apply(
        REPEAT.replace("slug: poll", "slug: poll-short").replace(
            "max_iterations: 5", "max_iterations: 2"
        )
    )
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "poll-short", {"dir": str(tmp_path)}).run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=60)
    assert (tmp_path / "tries").read_text().count("x") == 2
    assert statuses(view)["poll"] == "failed"
    assert any("still false after 2 iterations" in e["text"] for e in view["thread"])


FOREACH = """
slug: each
steps:
  - id: list
    run_command: printf 'a\\nb\\nc\\n'
  - id: each
    foreach: lines(steps.list.output)
    max_parallel: {parallel}
    steps:
      - id: touch
        run_command: >-
          echo "{{{{item}}}} {{{{iteration}}}}" >> {{{{payload.dir}}}}/{{{{item}}}};
          echo done-{{{{item}}}}
  - id: after
    run_command: echo "{{{{steps.each.output}}}}"
"""


def test_foreach_in_turn_and_in_parallel(conn, apply, procs, tmp_path: Path):
    apply(FOREACH.format(parallel=1))
    apply(FOREACH.format(parallel=3).replace("slug: each", "slug: each-parallel"))
    procs.start("conductor")
    procs.start("bots")
    for slug, sub in (("each", "seq"), ("each-parallel", "par")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub).chmod(0o777)  # steps run as their own user
        run_id = spawn(conn, slug, {"dir": str(tmp_path / sub)}).run_id
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
        for n, item in enumerate("abc", start=1):
            assert (tmp_path / sub / item).read_text() == f"{item} {n}\n"
        assert node(view, "after")["output"].strip() == '["done-a", "done-b", "done-c"]'
        each = node(view, "each")
        assert each["status"] == "completed"
        if slug == "each":
            assert len(each["iterations"]) == 3
        else:
            assert [b["name"] for b in each["branches"]] == ["1", "2", "3"]
            assert all(b["status"] == "completed" for b in each["branches"])
            children = conn.execute(
                "select count(*) as n from threadline.run_threads where parent_run_id = %s",
                (run_id,),
            ).fetchone()["n"]
            assert children == 3


PARALLEL = """
slug: fan
steps:
  - id: before
    run_command: echo base
  - id: fan
    parallel:
      lint:
        - id: lint
          run_command: echo "lint {{steps.before.output}}"
      tests:
        - id: unit
          run_command: echo unit
        - id: e2e
          run_command: echo "e2e after {{steps.unit.output}}"
  - id: join
    run_command: echo "{{steps.lint.output}} + {{steps.e2e.output}}"
  - id: report
    run_command: echo "{{steps.fan.output}}"
"""


def test_parallel_all_joins_branch_results(conn, apply, procs):
    apply(PARALLEL)
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "fan").run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert node(view, "join")["output"].strip() == "lint base + e2e after unit"
    # Each branch's output is its last step's, not an inherited step's.
    assert json.loads(node(view, "report")["output"]) == {
        "lint": "lint base",
        "tests": "e2e after unit",
    }
    fan = node(view, "fan")
    assert [b["name"] for b in fan["branches"]] == ["lint", "tests"]
    assert fan["started_at"] and fan["finished_at"] and fan["started_at"] <= fan["finished_at"]
    tests_branch = fan["branches"][1]
    assert [s["id"] for s in tests_branch["steps"]] == ["unit", "e2e"]
    assert all(s["status"] == "completed" for s in tests_branch["steps"])
    child = db.fetch_one(conn, "get_run", dict(run_id=tests_branch["run_id"]))
    assert str(child["parent_run_id"]) == run_id and child["parent"]["branch"] == "tests"
    # Branch runs hold no place of their own and are not listed as runs of their own.
    from engine_adapter.read.run_list import RunFilters, runs_page

    listed = {r.run_id for r in runs_page(conn, RunFilters(workflow="fan")).rows}
    assert listed == {run_id}


def test_parallel_any_cancels_the_losers_running_commands(conn, apply, procs, tmp_path: Path):
    apply("""
slug: race
steps:
  - id: race
    parallel:
      slow:
        - id: slow
          run_command: cd {{payload.dir}} && (flock {{payload.dir}}/slow.lock sleep 300 & wait)
      fast:
        - id: fast
          run_command: sleep 1; echo fast
    completion: any
  - id: after
    run_command: echo "winner said {{steps.fast.output}}"
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "race", {"dir": str(tmp_path)}).run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    race = node(view, "race")
    assert race["output"] == "fast" and race["status"] == "completed"
    slow = next(b for b in race["branches"] if b["name"] == "slow")
    assert slow["status"] == "cancelled" and not slow["winner"]
    harness.wait_for(
        lambda: not (tmp_path / "slow.lock").exists() or not _lock_held(tmp_path / "slow.lock"),
        timeout=20,
        what="the losing branch's command to be stopped",
    )
    assert node(view, "after")["output"].strip() == "winner said fast"


def _lock_held(path: Path) -> bool:
    import fcntl

    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_a_failed_branch_fails_the_group_and_retry_reruns_only_it(conn, apply, procs, tmp_path):
    apply("""
slug: flaky-fan
steps:
  - id: fan
    parallel:
      good:
        - id: good
          run_command: echo ok >> {{payload.dir}}/good
      flaky:
        - id: flaky
          run_command: echo try >> {{payload.dir}}/flaky; test -e {{payload.dir}}/fixed
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "flaky-fan", {"dir": str(tmp_path)}).run_id
    view = harness.wait_for_state(procs.url, run_id, "failed", timeout=60)
    assert node(view, "fan")["status"] == "failed"
    assert any("branch flaky did not complete" in e["text"] for e in view["thread"])
    (tmp_path / "fixed").touch()
    commands.retry_run(conn, run_id, OPERATOR)
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert (tmp_path / "good").read_text() == "ok\n"  # the completed branch never ran again
    assert (tmp_path / "flaky").read_text() == "try\ntry\n"


CHILD = """
slug: deploy
outputs:
  url: steps.ship.output
steps:
  - id: ship
    run_command: echo "https://example.test/{{payload.sha}}"
"""
PARENT = """
slug: release
steps:
  - id: deploy
    workflow: deploy
    payload:
      sha: "{{payload.sha}}"
  - id: announce
    run_command: echo "live at {{steps.deploy.output}}"
"""


def test_sub_workflow_takes_the_childs_outputs(conn, apply, procs):
    apply(CHILD)
    apply(PARENT)
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "release", {"sha": "abc123"}).run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    deploy = node(view, "deploy")
    assert deploy["status"] == "completed"
    child = harness.wait_for_state(procs.url, deploy["child_run"], "completed")
    assert child["outputs"] == {"url": "https://example.test/abc123"}
    assert child["parent"]["run_id"] == run_id
    assert '"url": "https://example.test/abc123"' in node(view, "announce")["output"]


def test_cancelling_a_parent_cancels_its_child(conn, apply, procs):
    apply(CHILD.replace('echo "https', 'sleep 300; echo "https'))
    apply(PARENT)
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "release", {"sha": "abc"}).run_id
    child_id = harness.wait_for(
        lambda: conn.execute(
            "select run_id from threadline.run_threads where parent_run_id = %s", (run_id,)
        ).fetchone(),
        what="the child run",
    )["run_id"]
    harness.wait_for_state(procs.url, str(child_id), "running")
    commands.cancel_run(conn, run_id, OPERATOR)
    child = harness.wait_for_state(procs.url, str(child_id), "cancelled", timeout=20)
    assert child["thread"][-1]["text"].startswith("Run cancelled: its parent run was cancelled")


def test_sub_workflow_cycles_are_refused_at_apply_and_write_nothing(conn, apply):
    import pytest

    from engine_adapter.recipes.recipes import RecipeError

    apply("slug: a\nsteps: [{id: call-b, workflow: b}]")  # b need not exist yet
    with pytest.raises(RecipeError) as info:
        apply("slug: b\nsteps: [{id: x, run_command: ls}, {id: call-a, workflow: a}]")
    assert info.value.errors == [
        "steps[1].workflow: 'a' leads back to 'b' (b -> a -> b); sub-workflows may not form a cycle"
    ]
    assert db.fetch_one(conn, "get_workflow", dict(slug="b")) is None
    with pytest.raises(RecipeError, match="'self' leads back to 'self'"):
        apply("slug: self\nsteps: [{id: again, if: true, then: [{id: me, workflow: self}]}]")


WAIT = """
slug: wait-deploy
steps:
  - id: build
    run_command: sleep {{payload.nap}}; echo built
  - id: deployed
    wait_for_event: [deploy.done, deploy.failed]
    key: "{{payload.sha}}"
    timeout: 60s
  - id: rollback
    if: steps.deployed.event == "deploy.failed"
    run_command: echo rolling back
  - id: after
    run_command: echo "got {{steps.deployed.output}}"
"""


def test_wait_for_event_by_key_and_an_early_event_is_not_lost(conn, apply, procs):
    from engine_adapter.runs.events import emit

    apply(WAIT)
    procs.start("conductor")
    procs.start("bots")
    late = spawn(conn, "wait-deploy", {"sha": "aaa", "nap": 0}).run_id
    view = harness.wait_for_state(procs.url, late, "waiting", timeout=30)
    assert statuses(view)["deployed"] == "waiting"
    assert view["event_wait"] == {"events": ["deploy.done", "deploy.failed"], "key": "aaa"}
    other = emit(conn, "deploy.done", {"url": "x"}, key="zzz")  # another key: no effect
    assert other.released == []
    assert harness.wait_for_state(procs.url, late, "waiting")["state"] == "waiting"
    done = emit(conn, "deploy.failed", {"why": "disk"}, key="aaa")
    assert len(done.released) == 1 and done.released[0].startswith(f"{late}:deployed:")
    view = harness.wait_for_state(procs.url, late, "completed", timeout=30)
    assert statuses(view)["rollback"] == "completed"
    assert node(view, "after")["output"].strip() == 'got {"why": "disk"}'

    early = spawn(conn, "wait-deploy", {"sha": "bbb", "nap": 3}).run_id
    emitted = emit(conn, "deploy.done", {"url": "y"}, key="bbb", event_id="deploy-bbb")
    assert emitted.released == []  # the run has not reached its wait yet
    again = emit(conn, "deploy.done", {"url": "y"}, key="bbb", event_id="deploy-bbb")
    assert again.released == []  # the same event id twice is one delivery
    view = harness.wait_for_state(procs.url, early, "completed", timeout=30)
    assert statuses(view)["rollback"] == "skipped"
    assert node(view, "after")["output"].strip() == 'got {"url": "y"}'
    assert any(
        "Waiting for event deploy.done or deploy.failed with key bbb" in e["text"]
        for e in view["thread"]
    )


def test_a_keyed_event_that_also_starts_a_workflow_still_ends_its_wait(conn, apply, procs):
    """An event that a workflow listens for (on_event) starts its run and still reaches the wait
    keyed as the caller said: the listener's run key once took the caller's key's place, so
    the wait was never ended and the event was kept under the wrong key."""
    from engine_adapter.runs.events import emit

    apply(WAIT)
    apply("slug: listener\non_event: deploy.done\nsteps:\n  - id: s\n    run_command: echo heard\n")
    procs.start("conductor")
    procs.start("bots")
    run = spawn(conn, "wait-deploy", {"sha": "ccc", "nap": 0}).run_id
    harness.wait_for_state(procs.url, run, "waiting", timeout=30)
    emitted = emit(conn, "deploy.done", {"url": "z"}, key="ccc")
    assert [r.workflow for r in emitted.runs] == ["listener"] and emitted.key == "ccc"
    assert len(emitted.released) == 1 and emitted.released[0].startswith(f"{run}:deployed:")
    stored = conn.execute(
        "select key from threadline.outside_events where event_id = %s", (emitted.event_id,)
    ).fetchone()
    assert stored["key"] == "ccc"
    view = harness.wait_for_state(procs.url, run, "completed", timeout=30)
    assert node(view, "after")["output"].strip() == 'got {"url": "z"}'
    harness.wait_for_state(procs.url, emitted.runs[0].run_id, "completed", timeout=30)


def test_a_run_whose_children_run_is_listed_at_the_step_that_started_them(conn, apply, procs):
    """While a parallel step's branches (or a sub-workflow) run, their parent is listed running
    at that step: it was listed at the step before (or, a sub-workflow first, pending at none),
    though every branch ran and one waited at its gate."""
    from engine_adapter.read.run_list import RunFilters, runs_page

    apply(
        "slug: fans\nsteps:\n  - id: build\n    run_command: echo built\n  - id: fan\n"
        "    parallel:\n      a: [{id: ga, human_gate: 'A ok?'}]\n"
        "      b: [{id: gb, run_command: 'true'}]\n"
    )
    apply("slug: asks\nsteps:\n  - id: ask\n    human_gate: 'Go?'\n")
    apply("slug: calls\nsteps:\n  - id: call\n    workflow: asks\n")
    procs.start("conductor")
    procs.start("bots")
    fans = spawn(conn, "fans", {}).run_id
    calls = spawn(conn, "calls", {}).run_id
    for parent in (fans, calls):
        harness.wait_for(
            lambda parent=parent: conn.execute(
                "select 1 from threadline.run_threads where parent_run_id = %s"
                " and state = 'waiting'",
                (parent,),
            ).fetchone(),
            timeout=30,
            what="a child waiting at its gate",
        )
    listed = {r.run_id: (r.state, r.current_step) for r in runs_page(conn, RunFilters()).rows}
    assert listed[fans] == ("running", "fan")
    assert listed[calls] == ("running", "call")


def test_wait_for_event_times_out_onto_its_path(conn, apply, procs):
    apply("""
slug: wait-short
steps:
  - id: ping
    wait_for_event: pong
    timeout: 1s
    on_timeout: continue
  - id: after
    run_command: echo "{{steps.ping.status}} {{steps.ping.reason}}"
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "wait-short").run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert node(view, "after")["output"].strip() == "failed no pong event in time"
    assert any("No pong event came in time" in e["text"] for e in view["thread"])


CHAOS_CHILD = """
slug: chaos-child
steps:
  - id: work
    run_command: echo child >> {{payload.dir}}/child; sleep 0.3
"""
CHAOS = """
slug: chaos-flow
steps:
  - id: pick
    if: payload.mode == "full"
    then:
      - id: fan
        parallel:
          a:
            - id: a1
              run_command: echo a >> {{payload.dir}}/a; sleep 0.3
            - id: a2
              run_command: echo a2 >> {{payload.dir}}/a2
          b:
            - id: b1
              run_command: echo b >> {{payload.dir}}/b; sleep 0.2
      - id: each
        foreach: range(3)
        max_parallel: 2
        steps:
          - id: item
            run_command: echo {{item}} >> {{payload.dir}}/item-{{item}}; sleep 0.2
      - id: sub
        workflow: chaos-child
        payload:
          dir: "{{payload.dir}}"
    else:
      - id: never
        run_command: touch {{payload.dir}}/never
"""


def test_conductor_sigkill_during_control_flow_changes_nothing(conn, apply, procs, tmp_path):
    """The conductor is SIGKILLed again and again while a branch, a parallel group, a parallel
    foreach and a sub-workflow run: every side effect happens once, the branch never changes."""
    import random

    apply(CHAOS_CHILD)
    apply(CHAOS)
    procs.start("bots")
    conductor = procs.start("conductor")
    run_id = spawn(conn, "chaos-flow", {"mode": "full", "dir": str(tmp_path)}).run_id
    rng = random.Random(7)
    kills = 0
    for _ in range(40):
        state = db.fetch_one(conn, "get_run", dict(run_id=run_id))["state"]
        if state == "completed":
            break
        time.sleep(rng.uniform(0.1, 0.5))
        harness.kill(conductor)
        kills += 1
        conductor = procs.start("conductor")
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert kills >= 3
    for name in ("a", "a2", "b", "item-0", "item-1", "item-2", "child"):
        assert (tmp_path / name).read_text().count("\n") == 1, name
    assert not (tmp_path / "never").exists()
    assert statuses(view)["never"] == "skipped"
    assert node(view, "fan")["status"] == "completed"
    # One child run per branch, item and sub-workflow: replays spawned nothing twice.
    children = conn.execute(
        "select count(*) as n from threadline.run_threads where parent_run_id = %s", (run_id,)
    ).fetchone()["n"]
    assert children == 2 + 3 + 1


RERUN = """
slug: rerun-me
steps:
  - id: fetch
    run_command: echo fetched >> {{payload.dir}}/fetch; echo data-1
    output: data
  - id: check
    if: payload.strict
    run_command: test -e {{payload.dir}}/{{payload.flag}} && echo "checked {{outputs.data}}"
  - id: publish
    run_command: echo "publish {{steps.check.output}}"
"""


def test_rerun_from_a_step_carries_over_what_came_before(conn, apply, procs, tmp_path):
    import pytest

    from engine_adapter.conductor.reruns import rerun

    apply(RERUN)
    procs.start("conductor")
    procs.start("bots")
    first = spawn(conn, "rerun-me", {"dir": str(tmp_path), "strict": True, "flag": "ok"}).run_id
    harness.wait_for_state(procs.url, first, "failed", timeout=30)

    with pytest.raises(commands.CommandRefused, match="step check is failed"):
        rerun(conn, first, "publish", OPERATOR)
    with pytest.raises(commands.CommandRefused, match="has no step 'nope'"):
        rerun(conn, first, "nope", OPERATOR)
    (tmp_path / "ready").touch()
    second = rerun(
        conn, first, "check", OPERATOR, {"dir": str(tmp_path), "strict": True, "flag": "ready"}
    ).run_id
    view = harness.wait_for_state(procs.url, second, "completed", timeout=30)
    assert statuses(view) == {"fetch": "carried_over", "check": "completed", "publish": "completed"}
    assert (tmp_path / "fetch").read_text() == "fetched\n"  # carried over: never run again
    assert node(view, "publish")["output"].strip() == "publish checked data-1"
    assert view["trigger"]["kind"] == "rerun" and view["trigger"]["run_id"] == first
    assert any(f"carried over from run {first}" in e["text"] for e in view["thread"])
    original = harness.wait_for_state(procs.url, first, "failed")
    assert any(e["text"].startswith("Rerun from step check by tester") for e in original["thread"])


def test_nested_a_parallel_group_in_a_foreach_and_a_branch_in_a_sub_workflow(
    conn, apply, procs, tmp_path
):
    apply("""
slug: inner
outputs:
  said: steps.choose.output
steps:
  - id: choose
    if: payload.n > 1
    then:
      - id: big
        run_command: echo big {{payload.n}}
    else:
      - id: small
        run_command: echo small {{payload.n}}
""")
    apply("""
slug: outer
steps:
  - id: each
    foreach: payload.ns
    max_parallel: 2
    steps:
      - id: both
        parallel:
          left:
            - id: left
              run_command: echo "L{{item}}" >> {{payload.dir}}/left
          right:
            - id: right
              run_command: echo "R{{item}}" >> {{payload.dir}}/right
      - id: sub
        workflow: inner
        payload:
          n: "{{item}}"
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "outer", {"ns": [1, 2, 3], "dir": str(tmp_path)}).run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=90)
    assert sorted((tmp_path / "left").read_text().split()) == ["L1", "L2", "L3"]
    assert sorted((tmp_path / "right").read_text().split()) == ["R1", "R2", "R3"]
    each = node(view, "each")
    assert [b["status"] for b in each["branches"]] == ["completed"] * 3
    item = each["branches"][1]  # item 2: its own steps, drawn inside the foreach
    assert [s["id"] for s in item["steps"]] == ["both", "sub"]
    both = item["steps"][0]
    assert [b["name"] for b in both["branches"]] == ["left", "right"]
    sub = item["steps"][1]
    inner = sub["branches"][0]["steps"]
    assert inner[0]["id"] == "choose" and inner[0]["output"] == "then"
    # A lone placeholder keeps its type: {{item}} passed the number 2, so n > 1 held.
    assert inner[0]["blocks"][0]["steps"][0]["output"].strip() == "big 2"
    assert each["output"] == [{"said": "else"}, {"said": "then"}, {"said": "then"}]


def test_the_reconcile_sweep_releases_a_gate_decided_without_its_event(conn, apply, procs):
    """The backstop: a decision row with no done event (written here by hand, as a crash
    between them would leave it) is found by the conductor's sweep, which emits the event with
    the same payload a decision emits (domain.decision_result)."""
    apply(
        "slug: swept\nsteps:\n- {id: ask, human_gate: Go on}\n- {id: after, run_command: echo done}"
    )
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "swept").run_id
    view = harness.wait_for_state(procs.url, run_id, "waiting", timeout=30)
    conn.execute(
        "insert into threadline.decisions (step_key, run_id, decision, actor, via, reason) "
        "values (%s, %s, 'approve', 'alice', 'console', 'by hand')",
        (view["gate"]["key"], run_id),
    )
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert node(view, "ask")["status"] == "completed" and node(view, "ask")["output"] == "by hand"


def test_a_late_finishing_loser_changes_nothing(conn, apply, procs):
    """Two branches that finish together: the first to finish wins, once; the other, finishing a
    moment later (or cancelled), leaves the parent's result and thread as they were."""
    apply("""
slug: photo-finish
steps:
  - id: race
    parallel:
      a: [{id: a, run_command: echo a}]
      b: [{id: b, run_command: echo b}]
    completion: any
  - id: after
    run_command: echo "won by {{steps.race.output}}"
""")
    procs.start("conductor")
    procs.start("bots")
    run_id = spawn(conn, "photo-finish").run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    race = node(view, "race")
    winner = race["output"]
    assert winner in ("a", "b") and node(view, "after")["output"].strip() == f"won by {winner}"
    loser = next(b for b in race["branches"] if b["name"] != winner)
    harness.wait_for_state(procs.url, loser["run_id"], ("completed", "cancelled"))
    time.sleep(1)  # the loser's run.done and first-finished events have been emitted by now
    again = harness.wait_for_state(procs.url, run_id, "completed")
    assert node(again, "race")["output"] == winner
    assert len(again["thread"]) == len(view["thread"])
    won = [b for b in node(again, "race")["branches"] if b.get("winner")]
    assert [b["name"] for b in won] == [winner]
