"""The shipped agent example, as a new user would run it: the bots file and the recipe from
assets/ applied as they are (only the bot's base URL pointed at the scripted model server), a
failing check, an agent that investigates, asks, and reports."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from engine_adapter.catalog.bot_backends import bots_without_backend, missing_line
from engine_adapter.catalog.bot_config import apply_bots, load_bots_file
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.model.identity import Actor
from engine_adapter.recipes.recipes import load_recipe_file
from engine_adapter.runs import gates
from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness
from tests.agent_server import ScriptedModel, answer, tool_call

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def test_the_shipped_agent_example_runs_end_to_end(conn, procs, tmp_path):
    apply_recipe(conn, load_recipe_file(ASSETS / "recipes" / "agent-triage.yaml"))
    # Before any model: the first-run line names the bot and what to do.
    assert bots_without_backend(conn, {}) == ["investigator"]
    assert "threadline bot apply" in missing_line(["investigator"])
    missing = tmp_path / "nope"
    script = [
        answer(None, tool_call("c1", "run_command", {"command": f"ls -ld {missing}; true"})),
        answer(None, tool_call("c2", "ask_human", {"question": f"Create {missing}?"})),
        answer("The directory was never created; the owner said to leave it."),
    ]
    with ScriptedModel(script) as model:
        bots = load_bots_file(ASSETS / "bots" / "local.yaml")
        apply_bots(conn, [dataclasses.replace(b, base_url=model.base_url) for b in bots])
        assert bots_without_backend(conn, {}) == []
        procs.start("conductor")
        procs.start("bots")
        run_id = spawn(conn, "agent-triage", {"target": str(missing)}).run_id
        harness.wait_for_state(procs.url, run_id, "waiting", timeout=30)
        gates.reply(conn, run_id, "no, leave it", Actor("alice", "console"))
        view = harness.wait_for_state(procs.url, run_id, "completed", timeout=30)
    assert [s["status"] for s in view["steps"]] == ["failed", "completed", "completed"]
    assert "never created" in view["steps"][2]["output"]
    assert len(model.requests) == 3
    # The runs page's chart of agent use, by workflow: three turns of 10 in, 5 out.
    from console.charts import agent_use_figure
    from engine_adapter.read.run_list import RunFilters, chart_data

    use = chart_data(conn, RunFilters())["agent_use"]
    assert use == [
        {"workflow": "agent-triage", "tokens_in": 30, "tokens_out": 15, "cost_usd": None}
    ]
    assert agent_use_figure(use).layout.title.text == "Agent tokens by workflow"
