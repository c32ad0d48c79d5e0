"""Agent tools that pause the loop: ask_human (a gate in the thread) and start_workflow (child
runs). While paused, no bot holds the step and no process waits; the loop goes on in a new
round with the answer, making no finished model call again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_adapter.catalog.bot_config import apply_bots, parse_bots
from engine_adapter.model.identity import Actor
from engine_adapter.read import read_model
from engine_adapter.runs import gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.agent_server import ScriptedModel, answer, tool_call


def setup(conn, apply, model: ScriptedModel, workdir: Path, tools: str, extra: str = "") -> None:
    apply_bots(conn, parse_bots({"helper": {"base_url": model.base_url, "model": "m"}}))
    apply(f"""
slug: agent
bot: helper
workdir: {workdir}
steps:
  - id: think
    dispatch_task: investigate the failing check
    tools: [{tools}]
{extra}""")


def open_claims(conn, run_id: str) -> int:
    return conn.execute(
        "select count(*) as n from threadline.step_claims"
        " where run_id = %s and finished_at is null",
        (run_id,),
    ).fetchone()["n"]


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_ask_human_waits_at_a_gate_holding_nothing_and_resumes_the_same_loop(
    conn, apply, procs, workdir
):
    script = [
        answer("let me ask", tool_call("c1", "ask_human", {"question": "Restart the service?"})),
        answer(None, tool_call("c2", "run_command", {"command": "echo restarted >> side"})),
        answer("restarted it"),
    ]
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir, "run_command, ask_human")
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent").run_id
        harness.wait_for_state(procs.url, run_id, "waiting", timeout=30)
        # In Needs you, with the model's question; no attempt is open, no process waits.
        gate = next(g for g in read_model.open_gates(conn) if g["run_id"] == run_id)
        assert gate["question"] == "Step think asks: Restart the service?"
        assert gate["accept"] == "any_reply"
        assert open_claims(conn, run_id) == 0
        # Both processes die while the run waits: nothing is lost, nothing is asked twice.
        procs.kill_all()
        procs.start("conductor")
        procs.start("bots")
        outcome = gates.reply(conn, run_id, "yes, go ahead", Actor("alice", "console"))
        assert outcome.decision == "reply"
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert len(model.requests) == 3  # no model call made twice
    assert view["steps"][0]["status"] == "completed"
    assert view["steps"][0]["output"] == "restarted it"
    assert view["steps"][0]["attempts"] == 1
    assert tool_results(model.requests[1]) == ["alice answered: yes, go ahead"]
    # The answer reached the model as the tool's result, not a second time as steering.
    users = [m["content"] for m in model.requests[2]["messages"] if m["role"] == "user"]
    assert users == ["investigate the failing check"]
    assert (workdir / "side").read_text() == "restarted\n"
    thread = [e["text"] for e in read_model.show_run(conn, run_id)["thread"]]
    asked = thread.index("Step think asks: Restart the service?")
    assert thread[asked + 1] == "yes, go ahead"
    assert "Step think goes on with the answer (round 2)." in thread


def test_a_reply_before_the_question_steers_and_a_denial_is_an_answer(conn, apply, procs, workdir):
    """`threadline deny` on the agent's question is an answer the model reads; the loop goes on."""
    script = [
        answer(None, tool_call("c1", "ask_human", {"question": "Delete the cache?"})),
        answer("left the cache alone"),
    ]
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir, "ask_human")
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent").run_id
        harness.wait_for_state(procs.url, run_id, "waiting", timeout=30)
        gates.decide(conn, run_id, "deny", Actor("bob", "cli"), "not today")
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert tool_results(model.requests[1]) == ["bob answered: (denied) not today"]
    assert view["steps"][0]["output"] == "left the cache alone"


def test_a_bad_question_is_answered_as_an_error_without_pausing(conn, apply, procs, workdir):
    script = [
        answer(None, tool_call("c1", "ask_human", {"question": "  "})),
        answer(None, tool_call("c2", "ask_human", {"prompt": "wrong argument"})),
        answer("gave up asking"),
    ]
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir, "ask_human")
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent").run_id
        harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert tool_results(model.requests[1]) == ["error: ask_human: question is empty"]
    assert tool_results(model.requests[2])[-1] == (
        "error: ask_human: argument 'question' is required"
    )
    assert read_model.show_run(conn, run_id)["steps"][0]["output"] == "gave up asking"


CHILD = """
slug: probe
bot: helper
steps:
  - id: probe
    run_command: "sleep {{payload.wait}}; echo probed {{payload.host}}"
outputs:
  result: steps.probe.output
"""


def test_start_workflow_runs_children_and_hands_their_results_back(conn, apply, procs, workdir):
    script = [
        answer(
            None,
            tool_call(
                "c1",
                "start_workflow",
                {
                    "runs": [
                        {"workflow": "probe", "payload": {"host": "a", "wait": 0}},
                        {"workflow": "probe", "payload": {"host": "b", "wait": 0}},
                        {"workflow": "agent"},
                    ]
                },
            ),
        ),
        answer(
            None,
            tool_call(
                "c2",
                "start_workflow",
                {
                    "runs": [
                        {"workflow": "probe", "payload": {"host": "a", "wait": 0}},
                        {"workflow": "probe", "payload": {"host": "b", "wait": 0}},
                    ]
                },
            ),
        ),
        answer(
            None,
            tool_call(
                "c3",
                "start_workflow",
                {
                    "runs": [
                        {"workflow": "probe", "payload": {"host": "slow", "wait": 60}},
                        {"workflow": "probe", "payload": {"host": "fast", "wait": 0}},
                    ],
                    "wait": "any",
                },
            ),
        ),
        answer("probed everything"),
    ]
    with ScriptedModel(script) as model:
        apply(CHILD)
        setup(conn, apply, model, workdir, "start_workflow", "    workflows: [probe]\n")
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent").run_id
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert len(model.requests) == 4
    assert view["steps"][0]["output"] == "probed everything"
    # A workflow the step does not allow: an error to the model, and no run started.
    assert tool_results(model.requests[1]) == [
        "error: start_workflow: runs[2]: workflow 'agent' is not one this step may start "
        "(allowed: probe)"
    ]
    every = json.loads(tool_results(model.requests[2])[-1])
    assert [(r["workflow"], r["status"], r["output"]) for r in every] == [
        ("probe", "completed", {"result": "probed a"}),
        ("probe", "completed", {"result": "probed b"}),
    ]
    first = json.loads(tool_results(model.requests[3])[-1])
    assert [(r["status"], r.get("output")) for r in first] == [
        ("cancelled", None),
        ("completed", {"result": "probed fast"}),
    ]
    children = conn.execute(
        "select run_id, state from threadline.run_threads where parent_run_id = %s order by run_id",
        (run_id,),
    ).fetchall()
    states = sorted(c["state"] for c in children)
    assert states == ["cancelled", "completed", "completed", "completed"]
    slow = next(r for r in first if r["status"] == "cancelled")
    assert read_model.show_run(conn, slow["run_id"])["state"] == "cancelled"


def test_an_agent_may_not_start_its_own_workflow(conn, apply):
    from engine_adapter.recipes.recipes import RecipeError

    with pytest.raises(RecipeError) as info:
        apply("""
slug: loop
steps:
  - id: think
    dispatch_task: go
    tools: [start_workflow]
    workflows: [loop]
""")
    assert info.value.errors == [
        "steps[0].workflows[0]: 'loop' leads back to 'loop' (loop -> loop); "
        "sub-workflows may not form a cycle"
    ]
