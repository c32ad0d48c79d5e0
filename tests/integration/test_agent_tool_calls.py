"""An agent step's tool calls are shown with their arguments and results: in `show --json` (the
step's tool_calls), in the thread (each model turn names its calls with their arguments) and in
`threadline show`; a long result is cut, its full length said."""

from __future__ import annotations

import json
from pathlib import Path

from engine_adapter.catalog.bot_config import apply_bots, parse_bots
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.agent_server import ScriptedModel, answer, tool_call

LONG = 5000  # characters a command prints: more than a result keeps


def test_an_agents_tool_calls_show_their_arguments_and_results(conn, apply, procs, workdir: Path):
    script = [
        answer(
            "looking",
            tool_call("c1", "run_command", {"command": "echo disk-report; df -h . >/dev/null"}),
            tool_call("c2", "write_file", {"path": "notes.txt", "content": "all fine"}),
        ),
        answer(None, tool_call("c3", "run_command", {"command": f"head -c {LONG} /dev/zero"})),
        answer("the disk is fine"),
    ]
    with ScriptedModel(script) as model:
        apply_bots(conn, parse_bots({"helper": {"base_url": model.base_url, "model": "m"}}))
        apply(f"""
slug: agent-calls
bot: helper
workdir: {workdir}
steps:
  - id: think
    dispatch_task: check the disk
    tools: [run_command, write_file]
""")
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent-calls").run_id
        harness.wait_for_state(procs.url, run_id, "completed", timeout=30)

    shown = harness.run_cli(procs.url, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    calls = view["steps"][0]["tool_calls"]
    assert [(c["turn"], c["name"]) for c in calls] == [
        (1, "run_command"),
        (1, "write_file"),
        (2, "run_command"),
    ]
    assert calls[0]["arguments"] == {"command": "echo disk-report; df -h . >/dev/null"}
    assert calls[0]["result"] == "exit code 0\ndisk-report\n"
    assert calls[1]["arguments"] == {"path": "notes.txt", "content": "all fine"}
    assert calls[1]["result"]  # what the tool answered the model
    long = calls[2]["result"]
    assert len(long) <= 2000 and long.endswith("…")  # cut, its full length kept
    assert calls[2]["result_chars"] > LONG

    texts = [e["text"] for e in view["thread"]]
    assert any(
        'calls run_command(command="echo disk-report; df -h . >/dev/null"), '
        'write_file(path="notes.txt", content="all fine")' in t
        for t in texts
    ), texts
    assert any(t.startswith("run_command: exit code 0\ndisk-report") for t in texts)

    text = harness.run_cli(procs.url, "show", run_id).stdout
    assert (
        '↳ run_command(command="echo disk-report; df -h . >/dev/null") → exit code 0 disk-report'
        in text
    )
    assert '↳ write_file(path="notes.txt", content="all fine") →' in text
