"""What an agent turn costs Threadline, the model's own latency aside: a scripted
OpenAI-compatible server on loopback answers at once, so the time between journal entries is
ours (the bot's HTTP call through the `openai` client, the journal writes, the tool's command).

    .venv/bin/python -m bench.agent_figures [--turns 10] [--runs 5] [--database-url URL]

Each run's one dispatch_task step makes `turns` tool-calling turns (run_command `true`), then
answers. On the database clock, from the journal in the thread:
  - model turn: a tool result -> the next model turn's entry;
  - tool turn: a model turn's entry -> its tool result's entry (a sandboxed `true`);
  - whole turn: one model turn's entry -> the next.
Prints p50 and p90 of each; nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.database import add_database_option, session
from bench.stats import Summary
from bench.threadline_figures import wait_completed
from engine_adapter.catalog.bot_config import apply_bots, parse_bots
from engine_adapter.catalog.workflows import apply_recipe
from engine_adapter.recipes.recipes import load_recipe_text
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from engine_adapter.testing import harness
from tests.agent_server import ScriptedModel, answer, tool_call

Conn = psycopg.Connection[Any]
RECIPE = """
slug: bench-agent
bot: bench-agent
steps:
  - id: think
    dispatch_task: call run_command until told otherwise, then answer
    tools: [run_command]
"""


@dataclass(frozen=True)
class Figures:
    turns: int
    runs: int
    model_turn: Summary
    tool_turn: Summary
    whole_turn: Summary

    def lines(self) -> list[str]:
        return [
            f"agent model turn overhead (scripted model)  {self.model_turn.fmt(1000)}",
            f"agent tool turn (run_command `true`)        {self.tool_turn.fmt(1000)}",
            f"agent whole turn                            {self.whole_turn.fmt(1000)}",
        ]


def script(turns: int) -> list[dict[str, Any]]:
    calls = [
        answer(None, tool_call(f"c{i}", "run_command", {"command": "true"}))
        for i in range(1, turns + 1)
    ]
    return [*calls, answer("done")]


def gaps(conn: Conn, run_id: str) -> tuple[list[float], list[float], list[float]]:
    """(model turn, tool turn, whole turn) seconds of one run, from its journal's entry times."""
    rows = conn.execute(
        "select kind, created_at from threadline.thread_entries"
        " where run_id = %s and kind in ('instruction', 'agent.assistant', 'agent.tool')"
        " order by seq",
        (run_id,),
    ).fetchall()
    model, tool, whole = [], [], []
    last_model = None
    for before, after in itertools.pairwise(rows):
        seconds = (after["created_at"] - before["created_at"]).total_seconds()
        if (before["kind"], after["kind"]) == ("agent.tool", "agent.assistant"):
            model.append(seconds)
        elif (before["kind"], after["kind"]) == ("agent.assistant", "agent.tool"):
            tool.append(seconds)
    for row in rows:
        if row["kind"] == "agent.assistant":
            if last_model is not None:
                whole.append((row["created_at"] - last_model).total_seconds())
            last_model = row["created_at"]
    return model, tool, whole


def measure(url: str, home: Path, turns: int, runs: int, timeout: float) -> Figures:
    model_s: list[float] = []
    tool_s: list[float] = []
    whole_s: list[float] = []
    with db.connect(url) as conn, ScriptedModel(script(turns) * (runs + 1)) as model:
        apply_bots(conn, parse_bots({"bench-agent": {"base_url": model.base_url, "model": "m"}}))
        apply_recipe(conn, load_recipe_text(RECIPE))
        procs = harness.ProcessSet(url, home)
        try:
            procs.start("conductor", wait=True, timeout=timeout)
            procs.start("bots", wait=True, timeout=timeout)
            for i in range(runs + 1):  # the first warms up: connections, the client, caches
                run_id = spawn(conn, "bench-agent").run_id
                wait_completed(conn, [run_id], timeout)
                if i:
                    m, t, w = gaps(conn, run_id)
                    model_s += m
                    tool_s += t
                    whole_s += w
        except Exception:
            print("benchmark failed; process logs:\n" + procs.log_tails(), file=sys.stderr)
            raise
        finally:
            procs.kill_all()
    return Figures(turns, runs, Summary.of(model_s), Summary.of(tool_s), Summary.of(whole_s))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="tool turns per run (default 10)")
    parser.add_argument("--runs", type=int, default=5, help="runs measured (default 5)")
    add_database_option(parser)
    args = parser.parse_args(argv)
    with session(args.database_url, "threadline-bench-agent-") as (url, home):
        figures = measure(url, home, args.turns, args.runs, timeout=120)
    print("\n".join(figures.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
