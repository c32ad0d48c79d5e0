"""Which bots can do a dispatch_task step: an agent bot (`threadline bot apply`) or a command
backend (THREADLINE_AGENT_CMD_<BOT>, or THREADLINE_AGENT_CMD, in the bots process). A new user's
first question is answered here: `up`, `health` and the console say which bots have neither."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import psycopg

from engine_adapter.store import db

AGENT_ENV = "THREADLINE_AGENT_CMD"


def command_env_name(bot: str) -> str:
    """The variable that names a bot's own command backend."""
    return f"{AGENT_ENV}_{bot.upper().replace('-', '_')}"


def agent_command(bot: str, env: Mapping[str, str] | None = None) -> str | None:
    """A bot's command backend: THREADLINE_AGENT_CMD_<BOT>, else THREADLINE_AGENT_CMD."""
    env = os.environ if env is None else env
    return env.get(command_env_name(bot)) or env.get(AGENT_ENV)


def bots_without_backend(
    conn: psycopg.Connection[Any], env: Mapping[str, str] | None = None
) -> list[str]:
    """Bots that enabled workflows send dispatch_task steps to, with no agent bot configured
    and no command backend in env (the bots process's; default this process's), sorted."""
    wanted = {r["bot"] for r in db.fetch_all(conn, "bots_of_agent_steps")}
    agents = {r["name"] for r in db.fetch_all(conn, "list_bots")}
    return sorted(b for b in wanted - agents if agent_command(b, env) is None)


def missing_line(bots: list[str]) -> str | None:
    """The one line `up` and `health` print when some bot has no model (None: all have one)."""
    if not bots:
        return None
    names = ", ".join(bots)
    return (
        f"agents: bot{'s' if len(bots) > 1 else ''} {names} ha{'ve' if len(bots) > 1 else 's'} "
        f"no model: `threadline bot apply bots.yaml` (docs: Agent bots) or set "
        f"{command_env_name(bots[0]) if len(bots) == 1 else AGENT_ENV}"
    )
