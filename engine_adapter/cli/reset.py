"""`threadline reset`: start over. Stops the home's embedded server and removes the home and
wherever its data lived (under /var/lib/threadline when root keeps it there), after asking."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from engine_adapter.model.settings import DATABASE_URL_ENV, threadline_home


def _confirmed(prompt: str) -> bool:
    """Whether the person at the terminal typed yes; no terminal input reads as no."""
    print(prompt, end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline()
    except (OSError, KeyboardInterrupt):
        return False
    return answer.strip().lower() in ("y", "yes")


def cmd_reset(args: argparse.Namespace) -> int:
    from engine_adapter.store.embedded import EmbeddedPostgres, remove_home

    home = threadline_home().expanduser().absolute()
    if not home.exists():
        print(f"nothing to reset: {home} does not exist")
        return 0
    where = EmbeddedPostgres(home).data_dir
    elsewhere = "" if where.is_relative_to(home) or not where.exists() else f" and {where.parent}"
    if os.environ.get(DATABASE_URL_ENV):
        elsewhere += f" (the database {DATABASE_URL_ENV} names is left alone)"
    prompt = (
        f"This stops Threadline's embedded database and deletes {home}{elsewhere}: every "
        "workflow, run and credential in it. Type yes to go on: "
    )
    if not args.yes and not _confirmed(prompt):
        print("reset cancelled; nothing was removed", file=sys.stderr)
        return 1
    for path in remove_home(home):
        print(f"removed {path}")
    print("the next `threadline up` starts afresh")
    return 0


def register(sub: Any) -> None:
    """Register `threadline reset` on the CLI's subcommands."""
    help = "start over: stop the embedded database and delete the home and its data"
    sp = sub.add_parser("reset", help=help, description=help)
    sp.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    sp.set_defaults(fn=cmd_reset)
