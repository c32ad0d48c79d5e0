"""What the command groups share: the connection (starting the embedded server when there is
none), the actor, printing a value or a listing (JSON with --json), and adding a command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

EXIT_INVALID = 10  # recipe validate: the recipe is invalid
AS_HELP = (
    "record this as done for NAME; you stay the actor (your OS account), and it never "
    "satisfies a gate's approvers"
)


def _conn() -> Any:
    """The CLI connects as the database's owner, whose login the credentials hold (whoever may
    read them holds the database anyway): the checked functions trust the actor an owner's
    caller passes, as they trust the OS account running the CLI (the authorization layer still
    decides and audits). The console's login acts only for a person who presents a credential
    (migration 045), which the CLI has none of. Without THREADLINE_DATABASE_URL the embedded
    server is ours: started (made and migrated, the first time) when it is not running."""
    import psycopg

    from engine_adapter.model.settings import DATABASE_URL_ENV, NotConfigured
    from engine_adapter.store import db

    try:
        return db.connect()
    except (NotConfigured, psycopg.OperationalError):
        if os.environ.get(DATABASE_URL_ENV):
            raise
    _start_embedded()
    return db.connect()


def _start_embedded_server() -> str:
    """The embedded server of THREADLINE_HOME, started (and made, the first time); its URL."""
    from engine_adapter.model.settings import threadline_home
    from engine_adapter.store.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(threadline_home())
    if not server.is_running():
        print(
            f"threadline: starting the embedded PostgreSQL in {threadline_home()} ...",
            file=sys.stderr,
        )
    return server.start()


def _start_embedded() -> str:
    """Start (initialise, the first time) the embedded server of THREADLINE_HOME, migrate it and
    give the process roles their logins; returns the owner's URL."""
    from engine_adapter.access.authorization import sync_rules
    from engine_adapter.model.settings import threadline_home
    from engine_adapter.store import db, schema
    from engine_adapter.store.embedded import home_lock
    from engine_adapter.store.roles import ensure_logins

    with home_lock(threadline_home()):  # concurrent first starts: one sets up, the rest wait
        url = _start_embedded_server()
        with db.connect(url) as conn:
            schema.migrate(conn)
            sync_rules(conn)
            ensure_logins(conn)
    return url


def _print(args: argparse.Namespace, value: Any, text: Callable[[Any], str]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(value, indent=2, default=str, ensure_ascii=False))
    else:
        print(text(value))


def _print_rows(
    args: argparse.Namespace, rows: list[Any], line: Callable[[Any], str], empty: str
) -> None:
    """A listing: JSON with --json, else a line per row (`empty` when there is none)."""
    _print(args, rows, lambda rs: "\n".join(line(r) for r in rs) or empty)


def _print_listing(
    args: argparse.Namespace,
    fetch: Callable[[Any], list[Any]],
    line: Callable[[Any], str],
    empty: str,
) -> int:
    """A listing read on its own connection: `fetch(conn)`'s rows, printed as _print_rows does."""
    with _conn() as conn:
        rows = fetch(conn)
    _print_rows(args, rows, line, empty)
    return 0


def _actor(args: argparse.Namespace) -> Any:
    """The CLI acts as the OS account running it; --as NAME records an action for someone else."""
    from engine_adapter.model.identity import cli_actor

    return cli_actor(getattr(args, "as_", None))


def add_command(
    sub: Any, name: str, fn: Callable[[argparse.Namespace], int], help: str, json_flag: bool = False
) -> argparse.ArgumentParser:
    """A command whose help is also its description, with --json when it prints a value."""
    sp = sub.add_parser(name, help=help, description=help)
    sp.set_defaults(fn=fn)
    if json_flag:
        sp.add_argument("--json", action="store_true", help="print JSON")
    return sp


def add_sub(
    group: Any,
    name: str,
    fn: Callable[[argparse.Namespace], int],
    help: str,
    *positionals: str,
    json: str | bool | None = False,
) -> argparse.ArgumentParser:
    """A group's subcommand (a help line, no description): its positional arguments, then
    --json with `json` as its help (None: no help; False: no --json)."""
    sp = group.add_parser(name, help=help)
    for arg in positionals:
        sp.add_argument(arg)
    if json is not False:
        sp.add_argument("--json", action="store_true", help=json)
    sp.set_defaults(fn=fn)
    return sp
