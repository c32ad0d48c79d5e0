"""Seed a Threadline with real runs of the example recipes, for notebook 08 (explore).

Unlike seed_runs.sql (rows of history only), every run here is run: a conductor and a bot process
take the steps, people's decisions go through the same doors as the CLI's. That is the honest
way to get steps, attempts, gate waits and threads the read views show as they would be. The
example recipes never fail, so a small `checks` recipe beside them does, one run in five; of
the gates some are approved, some denied, some answered with a reply, and two are left waiting.
One run in ten is an agent's (`summaries`, bot `seed-analyst`): with no model endpoint at hand,
the seed serves a stand-in on loopback while it runs (bench/stand_in_model.py) and prices its
model, so agent turns carry tokens and cost. The bot keeps pointing at that address afterwards.

    THREADLINE_SEED_RUNS=3000 python -m bench.seed_explore   # against THREADLINE_DATABASE_URL
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench.stand_in_model import StandInModel
from engine_adapter.explore.client import Client, connect

RUNS_ENV = "THREADLINE_SEED_RUNS"
DEFAULT_RUNS = 3000
RECIPES = Path(__file__).resolve().parents[1] / "assets" / "recipes"
LEFT_WAITING = 2  # gates nobody decided: the notebook drives one from a widget


def seed_runs() -> int:
    """How many runs to seed: $THREADLINE_SEED_RUNS, else a few thousand."""
    raw = os.environ.get(RUNS_ENV, str(DEFAULT_RUNS))
    if not raw.isdigit() or int(raw) < 10:
        raise ValueError(f"{RUNS_ENV} must be a whole number of runs, at least 10, not {raw!r}")
    return int(raw)


# Its test step exits with the payload's code: 0 passes, anything else fails the run.
CHECKS = """
slug: checks
steps:
  - id: build
    run_command: echo built
  - id: test
    run_command: exit {{payload.code}}
"""


# An agent step with no tools: one model turn a run, its tokens and cost in the thread.
AGENT_BOT, AGENT_MODEL = "seed-analyst", "seed-model"
PRICE_USD = (3.0, 15.0)  # per million tokens in and out, as a mid-sized hosted model costs
SUMMARIES = f"""
slug: summaries
bot: {AGENT_BOT}
steps:
  - id: summarise
    dispatch_task: Summarise build {{{{payload.n}}}} in one line.
"""


def recipes() -> list[str]:
    """The recipes the seed runs (apply them first)."""
    examples = [(RECIPES / f"{name}.yaml").read_text() for name in ("hello", "wait-for-reply")]
    return [*examples, CHECKS, SUMMARIES]


def point_agent_at(url: str, base_url: str) -> None:
    """The seed's agent bot on the model at base_url, and its model priced: before any spawn,
    since a run keeps the bot's settings and the price its spawn found."""
    from engine_adapter.catalog.bot_config import apply_bots, parse_bots, set_price
    from engine_adapter.store import db

    with db.connect(url) as conn:
        apply_bots(conn, parse_bots({AGENT_BOT: {"base_url": base_url, "model": AGENT_MODEL}}))
        set_price(conn, AGENT_MODEL, *PRICE_USD)


def seed(tl: Client, runs: int, timeout_s: float = 3600) -> dict[str, Any]:
    """Start `runs` runs on a write client and decide their gates as they open; returns what was
    started and how long it took. The recipes must be applied and a conductor and bots running."""
    with StandInModel() as model:
        point_agent_at(tl.url, model.base_url)
        return _seed(tl, runs, timeout_s)


def _seed(tl: Client, runs: int, timeout_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    hello, failing, gated, agents = [], [], [], []
    for i in range(runs):
        if i % 10 == 5:
            agents.append(tl.spawn("summaries", {"n": i}))
        elif i % 4 == 3:
            gated.append(tl.spawn("wait-for-reply"))
        elif i % 4 == 2:
            code = 3 if i % 5 == 2 else 0
            (failing if code else hello).append(tl.spawn("checks", {"code": code}))
        else:
            hello.append(tl.spawn("hello", {"name": f"user-{i}"}))
    undecided = set(gated[:LEFT_WAITING])
    deadline = time.monotonic() + timeout_s
    to_decide = [r for r in gated if r not in undecided]
    decided = 0
    while to_decide and time.monotonic() < deadline:
        waiting = set(tl.runs(workflow="wait-for-reply", state="waiting").run_id.astype(str))
        for n, run in enumerate(to_decide):
            if run not in waiting:
                continue
            if n % 3 == 0:
                tl.approve(run)
            elif n % 3 == 1:
                tl.deny(run, reason="not this one")
            else:
                tl.reply(run, f"echo {n}")
            decided += 1
        to_decide = [r for r in to_decide if r not in waiting]
        time.sleep(0.2)
    while time.monotonic() < deadline:
        busy = tl.runs(state="running").shape[0] + tl.runs(state="pending").shape[0]
        if not busy:
            break
        time.sleep(0.5)
    return {
        "runs": runs,
        "failing": len(failing),
        "gated": len(gated),
        "agent": len(agents),
        "decided": decided,
        "waiting": sorted(undecided),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    from engine_adapter.catalog.workflows import apply_recipe
    from engine_adapter.recipes.recipes import load_recipe_text
    from engine_adapter.store import db

    with db.connect() as conn:
        for text in recipes():
            apply_recipe(conn, load_recipe_text(text))
    print(seed(connect(write=True), seed_runs()))


if __name__ == "__main__":
    main()
