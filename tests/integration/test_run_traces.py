"""OpenTelemetry traces (issue 25), end to end: real conductor and bot processes send their spans
over OTLP/HTTP to a real receiver on loopback, which decodes them with opentelemetry-proto.

One workflow: command steps, a step whose first attempt fails and whose second passes, a step
whose first try fails and is retried (by a conductor started after the first was SIGKILLed), a
parallel group and an agent step. Every span of the run lands in the trace whose id is the run
id's 128 bits; step tries sit under the run, attempts under their try, agent turns under their
attempt; each branch is a trace of its own (its run id's), linked both ways with the group's step.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from engine_adapter.catalog.bot_config import apply_bots, parse_bots
from engine_adapter.model.identity import Actor
from engine_adapter.runs import commands
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.agent_server import ScriptedModel, answer, tool_call
from tests.otlp_receiver import Span, otlp_env, receiver

RECIPE = """
slug: traced
bot: helper
workdir: {workdir}
steps:
  - id: build
    run_command: echo built
  - id: flaky
    run_command: |
      n=$(cat count 2>/dev/null || echo 0); echo $((n+1)) > count
      [ "$n" -ge 1 ] && echo second-time-lucky
    retries: 1
    backoff: {{initial: 100ms, max: 100ms}}
  - id: fan
    parallel:
      lint:
        - id: lint
          run_command: echo lint
      tests:
        - id: unit
          run_command: echo unit
  - id: think
    dispatch_task: look around
    tools: [run_command]
  - id: once
    run_command: test -e go && echo went
"""


def one(spans: list[Span], name: str, **attributes: object) -> Span:
    found = [
        s
        for s in spans
        if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, [(s.name, s.attributes) for s in spans])
    return found[0]


def test_a_run_is_one_trace_across_processes_and_restarts(conn, apply, procs, workdir: Path):
    script = [
        answer(None, tool_call("c1", "run_command", {"command": "echo hi"})),
        answer("looked around"),
    ]
    with receiver() as got, ScriptedModel(script) as model:
        apply_bots(conn, parse_bots({"helper": {"base_url": model.base_url, "model": "m"}}))
        apply(RECIPE.format(workdir=workdir))
        env = otlp_env(got.endpoint)
        first = procs.start("conductor", env=env)
        procs.start("bots", env=env)
        run_id = spawn(conn, "traced").run_id
        harness.wait_for_state(procs.url, run_id, "failed", timeout=60)
        # The failed try's span is out; the conductor dies, and another takes the run over.
        got.wait_for(lambda s: [x for x in s if x.name == "step once"])
        harness.kill(first)
        procs.start("conductor", env=env, wait=True)
        (workdir / "go").write_text("")
        commands.retry_run(conn, run_id, Actor("tester", "cli"))
        harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
        got.wait_for(lambda s: [x for x in s if x.name == "run traced"])
        children = [
            str(r["run_id"])
            for r in conn.execute(
                "select run_id from threadline.run_threads where parent_run_id = %s", (run_id,)
            ).fetchall()
        ]
        assert len(children) == 2
        # Each branch's root span, and its step's attempt, has come in too.
        got.wait_for(
            lambda s: (
                {x.trace_id for x in s if x.name.startswith("attempt")}
                >= {uuid.UUID(c).int for c in children}
                and len([x for x in s if x.name == "run traced"]) == 3
                # the bots' spans come in their own batches, the retried step's attempt too
                and len([x for x in s if x.name == "attempt once"]) == 2
            )
        )
        spans = list(got.spans)

    trace = uuid.UUID(run_id).int
    mine = [s for s in spans if s.attributes.get("threadline.run_id") == run_id]
    assert {s.trace_id for s in mine} == {trace}  # conductors and bots alike, no context passed
    assert [s for s in spans if s.trace_id == trace] == mine

    root = one(mine, "run traced")
    assert root.parent_id is None and root.service == "threadline-conductor"
    assert root.attributes["threadline.workflow"] == "traced"
    assert root.attributes["threadline.state"] == "completed" and not root.error

    # Step tries sit under the run; the failed try and its retry are two spans.
    tries = {
        (s.attributes["threadline.step"], s.attributes["threadline.try"]): s
        for s in mine
        if s.name.startswith("step ")
    }
    # Each once, though the handler replays its run at every wake-up and on the new conductor.
    assert len([s for s in mine if s.name.startswith("step ")]) == len(tries)
    assert sorted(tries) == [
        ("build", 1),
        ("fan", 1),
        ("flaky", 1),
        ("once", 1),
        ("once", 2),
        ("think", 1),
    ]
    assert all(s.parent_id == root.span_id for s in tries.values())
    assert tries[("once", 1)].attributes["threadline.outcome"] == "failed"
    assert tries[("once", 1)].error and tries[("once", 1)].attributes["threadline.exit_code"] == 1
    assert tries[("once", 2)].attributes["threadline.outcome"] == "completed"
    assert tries[("build", 1)].attributes["threadline.step_kind"] == "run_command"
    assert tries[("build", 1)].start_ns >= root.start_ns
    assert tries[("once", 2)].end_ns <= root.end_ns

    # Bot attempts sit under their try: the flaky step's two, with exit code and outcome.
    attempts = [s for s in mine if s.name == "attempt flaky"]
    assert sorted(
        (s.attributes["threadline.attempt"], s.attributes["threadline.outcome"]) for s in attempts
    ) == [(1, "failed"), (2, "completed")]
    assert {s.parent_id for s in attempts} == {tries[("flaky", 1)].span_id}
    failed = next(s for s in attempts if s.attributes["threadline.attempt"] == 1)
    assert failed.attributes["threadline.exit_code"] == 1 and failed.error
    assert failed.service == "threadline-bots" and failed.attributes["threadline.sandbox"]
    once = [s for s in mine if s.name == "attempt once"]
    assert sorted(s.parent_id for s in once) == sorted(tries[("once", n)].span_id for n in (1, 2))

    # Agent turns sit under their attempt, with their tokens.
    think = one(mine, "attempt think")
    assert think.parent_id == tries[("think", 1)].span_id
    turns = sorted(
        (s for s in mine if s.name == "agent turn think"),
        key=lambda s: s.attributes["threadline.turn"],
    )
    assert [s.attributes["threadline.turn"] for s in turns] == [1, 2]
    assert all(s.parent_id == think.span_id for s in turns)
    assert turns[0].attributes["threadline.tokens_in"] == 10
    assert turns[0].attributes["threadline.tokens_out"] == 5
    assert turns[0].attributes["threadline.model"] == "m"

    # The parallel group: each branch is a run of its own and a trace of its own, linked both ways.
    fan = tries[("fan", 1)]
    child_roots = {
        c: one([s for s in spans if s.trace_id == uuid.UUID(c).int], "run traced") for c in children
    }
    linked = sorted((uuid.UUID(c).int, r.span_id) for c, r in child_roots.items())
    assert sorted(fan.links) == linked
    for child, child_root in child_roots.items():
        assert child_root.parent_id is None
        assert child_root.links == [(trace, fan.span_id)]
        assert child_root.attributes["threadline.parent_run_id"] == run_id
        branch = [s for s in spans if s.attributes.get("threadline.run_id") == child]
        step = next(s for s in branch if s.name.startswith("step "))
        attempt = next(s for s in branch if s.name.startswith("attempt "))
        assert step.parent_id == child_root.span_id and attempt.parent_id == step.span_id
        assert {s.trace_id for s in branch} == {uuid.UUID(child).int}


GATED = """
slug: held
steps:
  - id: ask
    human_gate: "Go?"
"""


def test_a_run_cancelled_from_outside_sends_its_root_span_from_the_canceller(conn, apply, procs):
    """`threadline cancel` ends the run in its own process (no conductor's handler runs again):
    the run's trace gets its root span from there, in the run's trace, as cancelled."""
    with receiver() as got:
        apply(GATED)
        env = otlp_env(got.endpoint)
        procs.start("conductor", env=env)
        run_id = str(spawn(conn, "held").run_id)
        harness.wait_for_state(procs.url, run_id, "waiting")
        out = harness.run_cli(procs.url, "cancel", run_id, home=procs.home, env=env)
        assert out.returncode == 0, out.stderr
        root = got.wait_for(lambda s: [x for x in s if x.name == "run held"])
    assert len(root) == 1 and root[0].trace_id == uuid.UUID(run_id).int
    assert root[0].parent_id is None and root[0].service == "threadline-cli"
    assert root[0].attributes["threadline.state"] == "cancelled" and root[0].error
