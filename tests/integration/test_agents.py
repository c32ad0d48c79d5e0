"""Agent bots: the durable agent loop over a scripted OpenAI-compatible server on 127.0.0.1.

The `openai` client in the bot process talks to the server over real HTTP; the server counts the
model calls, and the tools' side effects land on disk, so a test can prove what ran once."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from engine_adapter.catalog.bot_config import apply_bots, parse_bots
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.agent_server import ScriptedModel, answer, tool_call


def setup(conn, apply, model: ScriptedModel, workdir: Path, max_turns: int = 20) -> None:
    apply_bots(
        conn,
        parse_bots({"helper": {"base_url": model.base_url, "model": "m", "max_turns": max_turns}}),
    )
    apply(f"""
slug: agent
bot: helper
workdir: {workdir}
steps:
  - id: think
    dispatch_task: look around and report
    tools: [run_command, read_file, write_file]
""")


def run_agent(
    conn, apply, procs, workdir: Path, script: list, state: str, max_turns: int = 20
) -> tuple[dict, ScriptedModel, str]:
    """One run of the agent workflow to `state`; the view, the (stopped) model and the run id."""
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir, max_turns)
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent").run_id
        view = harness.wait_for_state(procs.url, run_id, state, timeout=30)
    return view, model, run_id


def agent_entries(conn, run_id: str) -> list[tuple[str, dict]]:
    rows = conn.execute(
        "select kind, data from threadline.thread_entries"
        " where run_id = %s and kind like 'agent.%%' order by seq",
        (run_id,),
    ).fetchall()
    return [(r["kind"], r["data"]) for r in rows]


def test_multi_turn_tool_loop_is_journaled_in_the_thread(conn, apply, procs, workdir):
    script = [
        answer(
            "writing first",
            tool_call("c1", "write_file", {"path": "notes/a.txt", "content": "hello"}),
            tool_call("c2", "run_command", {"command": "cat notes/a.txt; echo ran >> side"}),
        ),
        answer(None, tool_call("c3", "read_file", {"path": "notes/a.txt"})),
        answer("all done: hello"),
    ]
    view, model, run_id = run_agent(conn, apply, procs, workdir, script, "completed")
    assert len(model.requests) == 3
    assert view["steps"][0]["output"] == "all done: hello"
    assert (workdir / "side").read_text() == "ran\n"
    entries = agent_entries(conn, run_id)
    assert [(k, d["turn"], d["message"]["role"]) for k, d in entries] == [
        ("agent.assistant", 1, "assistant"),
        ("agent.tool", 1, "tool"),
        ("agent.tool", 1, "tool"),
        ("agent.assistant", 2, "assistant"),
        ("agent.tool", 2, "tool"),
        ("agent.assistant", 3, "assistant"),
    ]
    results = [d["message"] for k, d in entries if k == "agent.tool"]
    assert [m["tool_call_id"] for m in results] == ["c1", "c2", "c3"]
    assert results[1]["content"] == "exit code 0\nhello"
    assert results[2]["content"] == "hello"
    # The model saw the whole conversation: the instruction, its calls and their results.
    last = model.requests[2]["messages"]
    assert last[0] == {"role": "user", "content": "look around and report"}
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "tool", "assistant", "tool"]
    names = [t["function"]["name"] for t in model.requests[0]["tools"]]
    assert names == ["run_command", "read_file", "write_file", "finish"]


@pytest.mark.parametrize("point", ["agent_after_model", "agent_after_tool"])
def test_sigkilled_bot_resumes_without_repeating_a_model_call_or_tool(
    conn, apply, procs, workdir, point
):
    script = [
        answer(None, tool_call("c1", "run_command", {"command": "echo x >> side"})),
        answer(None, tool_call("c2", "finish", {"result": {"ok": True, "n": 1}})),
    ]
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir)
        procs.start("conductor")
        doomed = procs.start("bots", env={"THREADLINE_CRASH_AT": point})
        run_id = spawn(conn, "agent").run_id
        assert doomed.wait(timeout=30) == -signal.SIGKILL
        assert len(model.requests) == 1
        procs.start("bots")
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
        assert len(model.requests) == 2  # the first model call was not made again
    assert (workdir / "side").read_text() == "x\n"  # the tool ran once
    assert view["steps"][0]["output"] == {"ok": True, "n": 1}
    assert view["steps"][0]["attempts"] == 2
    kinds = [k for k, _ in agent_entries(conn, run_id)]
    assert kinds == ["agent.assistant", "agent.tool", "agent.assistant"]


def test_malformed_tool_calls_are_answered_as_errors(conn, apply, procs, workdir, tmp_path):
    script = [
        answer(
            None,
            tool_call("c1", "run_command", "{not json"),
            tool_call("c2", "delete_everything", {}),
            tool_call("c3", "read_file", {"path": "../outside.txt"}),
            tool_call("c4", "write_file", {"path": "x.txt"}),
            tool_call("c6", "write_file", {"path": str(tmp_path / "abs.txt"), "content": "no"}),
            tool_call("c7", "finish", {"result": "not an object"}),
        ),
        answer("understood"),
    ]
    view, model, _ = run_agent(conn, apply, procs, workdir, script, "completed")
    tool_messages = [m for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert view["steps"][0]["output"] == "understood"
    answers = [m["content"] for m in tool_messages]
    assert all(a.startswith("error: ") for a in answers), answers
    for text, expected in zip(
        answers,
        [
            "not valid JSON",
            "unknown tool 'delete_everything'",
            "may not contain '..'",
            "argument 'content' is required",
            "must be relative",
            "argument 'result' must be a JSON object",
        ],
        strict=True,
    ):
        assert expected in text
    assert not (tmp_path / "abs.txt").exists()


def test_max_turns_fails_the_step_with_its_reason(conn, apply, procs, workdir):
    script = [
        answer(None, tool_call("c1", "run_command", {"command": "true"})),
        answer(None, tool_call("c2", "run_command", {"command": "true"})),
        answer("never asked for"),
    ]
    view, model, _ = run_agent(conn, apply, procs, workdir, script, "failed", max_turns=2)
    assert len(model.requests) == 2
    step = view["steps"][0]
    assert step["status"] == "failed"
    assert "used all 2 turns (max_turns) without finishing" in step["output"]


def test_bot_apply_and_list_and_the_run_snapshot(conn, apply, db_url, tmp_path):
    """`threadline bot apply` as the owner; a run keeps the settings it was spawned
    with, whatever the bot becomes later."""
    bots = tmp_path / "bots.yaml"
    bots.write_text("helper:\n  base_url: http://127.0.0.1:9/v1\n  model: one\n  api_key: env:K\n")
    done = harness.run_cli(db_url, "bot", "apply", str(bots))
    assert done.returncode == 0, done.stderr
    apply("slug: agent\nbot: helper\nsteps:\n  - id: s\n    dispatch_task: go\n")
    run_id = spawn(conn, "agent").run_id
    bots.write_text("helper:\n  base_url: http://127.0.0.1:9/v1\n  model: two\n  max_turns: 3\n")
    assert harness.run_cli(db_url, "bot", "apply", str(bots)).returncode == 0
    listed = json.loads(harness.run_cli(db_url, "bot", "list", "--json").stdout)
    assert [(b["name"], b["model"], b["max_turns"]) for b in listed] == [("helper", "two", 3)]
    agent = conn.execute(
        "select agent from threadline.run_threads where run_id = %s", (run_id,)
    ).fetchone()["agent"]
    assert (agent["model"], agent["max_turns"], agent["api_key_env"]) == ("one", 20, "K")

    bots.write_text("helper:\n  model: 3\n")
    bad = harness.run_cli(db_url, "bot", "apply", str(bots))
    assert bad.returncode == 10
    assert bad.stderr.splitlines() == [
        "helper.base_url: required, a non-empty string",
        "helper.model: required, a non-empty string",
    ]


def test_a_person_steers_a_running_agent_through_the_thread(conn, apply, procs, workdir):
    """A message written into the thread while the agent works reaches the model at its next
    turn, as a user message, once; and the thread keeps it where it was written."""
    from engine_adapter.model.identity import Actor
    from engine_adapter.runs import gates

    script = [
        answer(None, tool_call("c1", "run_command", {"command": "sleep 3; echo looked"})),
        answer("done, disk checked too"),
    ]
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir)
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent").run_id
        harness.wait_for(lambda: len(model.requests) == 1, timeout=30, what="the first turn")
        gates.reply(conn, run_id, "please check the disk too", Actor("alice", "console"))
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert view["steps"][0]["output"] == "done, disk checked too"
    second = model.requests[1]["messages"]
    people = [m["content"] for m in second if m["role"] == "user"]
    assert people == ["look around and report", "alice: please check the disk too"]
    assert second[-1]["role"] == "user"  # after the tool result: delivered at this turn
    assert all(
        m["content"] != "alice: please check the disk too" for m in model.requests[0]["messages"]
    )


def test_transient_model_errors_are_retried_and_refusals_fail_at_once(conn, apply, procs, workdir):
    """429 (honouring Retry-After) and 500 are retried inside the attempt; a 401 or a context
    too long fails the step at once, with the server's own words."""
    from tests.agent_server import http_error

    script = [
        http_error(429, "slow down", retry_after=1),
        http_error(500, "hiccup"),
        answer("fine now"),
    ]
    view, model, _ = run_agent(conn, apply, procs, workdir, script, "completed")
    assert view["steps"][0]["output"] == "fine now" and len(model.requests) == 3
    assert view["steps"][0]["attempts"] == 1  # retried by the client: no step attempt burnt

    for status, words in ((401, "invalid api key"), (400, "maximum context length exceeded")):
        with ScriptedModel([http_error(status, words)]) as refusing:
            setup(conn, apply, refusing, workdir)
            run_id = spawn(conn, "agent", {"n": status}).run_id
            view = harness.wait_for_state(procs.url, run_id, "failed", timeout=30)
        assert len(refusing.requests) == 1
        assert f"the model refused turn 1 ({status}): {words}" in view["steps"][0]["output"]


def test_tokens_are_counted_per_turn_and_step_and_a_budget_stops_the_run(
    conn, apply, procs, workdir
):
    """The scripted server reports 10 tokens in and 5 out per answer."""
    script = [
        answer(None, tool_call("c1", "run_command", {"command": "true"})),
        answer("two turns"),
    ]
    view, _, run_id = run_agent(conn, apply, procs, workdir, script, "completed")
    assert view["steps"][0]["tokens"] == {"in": 20, "out": 10}
    turns = [d["usage"] for kind, d in agent_entries(conn, run_id) if kind == "agent.assistant"]
    assert turns == [{"in": 10, "out": 5}, {"in": 10, "out": 5}]

    with ScriptedModel(script) as model:
        apply_bots(
            conn,
            parse_bots(
                {
                    "helper": {
                        "base_url": model.base_url,
                        "model": "m",
                        "max_tokens_per_run": 15,
                    }
                }
            ),
        )
        run_id = spawn(conn, "agent", {"budget": 15}).run_id
        view = harness.wait_for_state(procs.url, run_id, "failed", timeout=30)
    assert len(model.requests) == 1  # the second turn would have gone over the budget
    assert (
        "the run used 15 tokens; its bot's budget (max_tokens_per_run) is 15"
        in (view["steps"][0]["output"])
    )


def test_a_bots_model_key_never_reaches_a_step(conn, apply, procs, workdir):
    """A recipe may name any variable in `env`; an agent bot's key variable is still withheld."""
    apply_bots(
        conn,
        parse_bots(
            {
                "keyed": {
                    "base_url": "http://127.0.0.1:9/v1",
                    "model": "m",
                    "api_key": "env:TL_TEST_MODEL_KEY",
                }
            }
        ),
    )
    apply("slug: leak\nenv: [TL_TEST_MODEL_KEY]\nsteps: [{id: look, run_command: env}]")
    procs.start("conductor")
    procs.start("bots", env={"TL_TEST_MODEL_KEY": "sk-do-not-leak"})
    run_id = spawn(conn, "leak").run_id
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert "sk-do-not-leak" not in view["steps"][0]["output"]
    assert "THREADLINE_STEP_KEY=" in view["steps"][0]["output"]


def test_a_priced_model_costs_per_turn_step_and_run_and_a_spawned_run_keeps_its_price(
    conn, apply, procs, workdir, db_url
):
    """`threadline price set` prices a model; a run keeps the price it was spawned with."""
    script = [answer(None, tool_call("c1", "run_command", {"command": "true"})), answer("done")]
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir)
        priced = harness.run_cli(db_url, "price", "set", "m", "--input", "2", "--output", "10")
        assert priced.returncode == 0, priced.stderr
        procs.start("conductor")
        run_id = spawn(conn, "agent").run_id  # spawned at $2 / $10 per million
        repriced = harness.run_cli(db_url, "price", "set", "m", "--input", "1000", "--output", "0")
        assert repriced.returncode == 0
        procs.start("bots")
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    turn = (10 * 2 + 5 * 10) / 1e6  # the scripted server's 10 tokens in, 5 out per turn
    assert view["steps"][0]["tokens"] == {"in": 20, "out": 10, "cost_usd": round(2 * turn, 8)}
    assert view["agent_use"] == {"in": 20, "out": 10, "cost_usd": 2 * turn, "turns": 2}
    texts = [e["text"] for e in view["thread"] if e["kind"] == "agent.assistant"]
    assert texts[0].endswith(f"[tokens: 10 in, 5 out · ${turn:.6f}]")
    listed = harness.run_cli(db_url, "price", "list").stdout
    assert "$1000 in, $0 out per 1M" in listed
    bad = harness.run_cli(db_url, "price", "set", "m", "--input", "-1", "--output", "1")
    assert bad.returncode == 2 and "--input: -1.0 must be USD per million tokens" in bad.stderr


def test_a_model_call_that_times_out_is_retried_without_burning_an_attempt(
    conn, apply, procs, workdir
):
    """The client's timeout is the step's: a model that answers too late is asked again inside
    the same attempt."""
    from tests.agent_server import slow

    script = [slow(answer("too late"), 4), answer("in time")]
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir)
        apply(f"""
slug: agent
bot: helper
workdir: {workdir}
steps:
  - id: think
    dispatch_task: look around and report
    timeout: 2s
""")
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent").run_id
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert view["steps"][0]["output"] == "in time"
    assert len(model.requests) == 2 and view["steps"][0]["attempts"] == 1


def test_a_bot_killed_during_a_tool_call_runs_that_call_again_and_nothing_finished(
    conn, apply, procs, workdir
):
    """SIGKILL while a tool's command runs: the next attempt makes no finished model call again;
    the unfinished call runs again (it never reported), and its interrupted first run left only
    the side effect it had made before the kill."""
    command = "echo started >> runs; sleep 5; echo finished >> ends"
    script = [
        answer(None, tool_call("c1", "run_command", {"command": command})),
        answer("done"),
    ]
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir)
        procs.start("conductor")
        doomed = procs.start("bots")
        run_id = spawn(conn, "agent").run_id
        harness.wait_for(lambda: (workdir / "runs").exists(), timeout=30, what="the tool to run")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        procs.start("bots")
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert len(model.requests) == 2  # turn 1 was not asked again
    assert (workdir / "runs").read_text() == "started\nstarted\n"  # the call, again
    assert (workdir / "ends").read_text() == "finished\n"  # the killed run never finished
    assert view["steps"][0]["attempts"] == 2
    kinds = [k for k, _ in agent_entries(conn, run_id)]
    assert kinds == ["agent.assistant", "agent.tool", "agent.assistant"]


def test_a_failure_the_conversation_would_repeat_is_not_retried_but_threadline_retry_starts_afresh(
    conn, apply, procs, workdir, db_url
):
    script = [
        answer(None, tool_call("c1", "run_command", {"command": "true"})),
        answer("fresh start, done"),
    ]
    with ScriptedModel(script) as model:
        setup(conn, apply, model, workdir, max_turns=1)
        apply(f"""
slug: agent
bot: helper
workdir: {workdir}
steps:
  - id: think
    dispatch_task: look around and report
    tools: [run_command]
    retries: 2
""")
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent").run_id
        view = harness.wait_for_state(procs.url, run_id, "failed", timeout=30)
        step = view["steps"][0]
        assert step["attempts"] == 1 and len(model.requests) == 1  # no retry of the same end
        assert "not retried: the same conversation would end the same way" in step["reason"]
        assert harness.run_cli(db_url, "retry", run_id).returncode == 0
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    second = model.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user"]  # a new try: a fresh conversation
    assert view["steps"][0]["output"] == "fresh start, done" and view["steps"][0]["tries"] == 2
