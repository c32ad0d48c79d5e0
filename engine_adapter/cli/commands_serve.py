"""`threadline up | conductor | bots | hooks | console | db`: the processes Threadline runs
and the database they share."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import psycopg

from engine_adapter.cli.common import _actor, _conn, _start_embedded_server, add_command
from engine_adapter.model.errors import Invalid, Refused


def cmd_up(args: argparse.Namespace) -> int:
    from engine_adapter.cli.supervisor import up

    return up(
        console=not args.no_console,
        port=args.port,
        hooks=not args.no_hooks,
        hooks_port=args.hooks_port,
        no_auth=args.no_auth,
    )


def cmd_conductor(args: argparse.Namespace) -> int:
    from engine_adapter.conductor.conductor import main

    main(threads=args.threads)
    return 0


def cmd_bots(args: argparse.Namespace) -> int:
    from engine_adapter.bots.bots import main

    main(concurrency=args.concurrency, bots=args.bot or None)
    return 0


def cmd_hooks(args: argparse.Namespace) -> int:
    from engine_adapter.ingress.hooks import Limits, serve

    limits = Limits(
        max_bytes=args.max_bytes,
        request_s=args.request_timeout,
        idle_s=args.idle_timeout,
        connections=args.max_connections,
    )
    return serve(args.host, args.port, limits=limits, tolerance=args.tolerance)


def cmd_console(args: argparse.Namespace) -> int:
    from console.access import is_loopback
    from console.app import serve

    allow_no_auth(args.no_auth and is_loopback(args.address))  # elsewhere serve refuses it
    serve(port=args.port, address=args.address, no_auth=args.no_auth, link=not args.no_link)
    return 0


def cmd_console_link(args: argparse.Namespace) -> int:
    """A fresh one-time sign-in link for the account running this command."""
    from console import tokens
    from engine_adapter.model.identity import os_user
    from engine_adapter.model.settings import threadline_home

    if args.minutes < 1:
        raise Invalid(f"--minutes: {args.minutes}; a link must work for at least a minute")
    try:
        with _conn() as conn:  # the owner's login: only it keeps a link's hash
            token = tokens.mint(conn, os_user(), ttl_s=args.minutes * 60)
    except psycopg.errors.InsufficientPrivilege:
        raise Refused(
            "cannot mint a sign-in link with this database login: run this as the account "
            f"that runs Threadline (whose credentials in {threadline_home()} hold the owner's)"
        ) from None
    print(tokens.link(token, args.link_port, args.host))
    print(f"(signs in {os_user()} once, within {args.minutes} minutes)", file=sys.stderr)
    return 0


def allow_no_auth(on: bool) -> None:
    """The owner's switch for sign-in without a proof (the database opens such a session only
    while it is on, for the OS account running this). Through another login (`up` runs the
    console as the console's login, and sets the switch itself) nothing is switched: a console
    with --no-auth then starts only where the owner turned sign-in off."""
    from console.sessions import allow_no_auth as switch
    from engine_adapter.model.identity import os_user

    try:
        with _conn() as conn:
            switch(conn, os_user() if on else None, os_user())
    except psycopg.errors.InsufficientPrivilege:
        pass


def cmd_console_user_add(args: argparse.Namespace) -> int:
    import getpass

    from console.users import add_user

    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise Invalid("the passwords differ; nothing written")
    with _conn() as conn:  # the authorization layer decides and audits (an admin's action)
        add_user(conn, args.name, password, args.role, _actor(args))
    print(f"{args.name} ({', '.join(sorted(set(args.role)))}) signs in to the console by password")
    return 0


def cmd_console_user_remove(args: argparse.Namespace) -> int:
    from console.users import remove_user

    with _conn() as conn:
        if not remove_user(conn, args.name, _actor(args)):
            raise Invalid(f"user {args.name!r}: has no console password")
    print(f"{args.name} signs in by password no more (their password sessions ended)")
    return 0


def cmd_db_migrate(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from engine_adapter.access.authorization import sync_rules
    from engine_adapter.model.settings import DATABASE_URL_ENV, threadline_home
    from engine_adapter.store import db
    from engine_adapter.store.embedded import home_lock
    from engine_adapter.store.roles import ensure_logins
    from engine_adapter.store.schema import migrate, set_engine

    url = None if os.environ.get(DATABASE_URL_ENV) else _start_embedded_server()
    with (
        home_lock(threadline_home()) if url else nullcontext(),
        db.connect(url) as conn,  # the owner: the one process that may change the schema
    ):
        applied = migrate(conn)
        sync_rules(conn)
        ensure_logins(conn)
        if args.engine:
            set_engine(conn, specialised=args.engine == "specialised")
    print("applied: " + ", ".join(applied) if applied else "up to date")
    if args.engine:
        print(f"the engine's runtime functions run {args.engine} for Threadline's queue")
    print(
        "each process kind has its own login: `threadline db url --role KIND` "
        "(conductor, bots, console, hooks, viewer)"
    )
    return 0


def cmd_db_url(args: argparse.Namespace) -> int:
    from engine_adapter.model.settings import NotConfigured, database_url, read_credentials

    if args.role and args.role not in read_credentials().get("roles", {}):
        raise NotConfigured(
            f"no login for role {args.role!r} here yet: run `threadline db migrate`"
        )
    print(database_url(args.role))
    return 0


def register(sub: Any) -> None:
    from engine_adapter.ingress.hooks import (
        DEFAULT_PORT,
        IDLE_TIMEOUT_S,
        MAX_BYTES,
        MAX_CONNECTIONS,
        REQUEST_TIMEOUT_S,
    )
    from engine_adapter.ingress.webhook_auth import TOLERANCE_S

    sp = add_command(
        sub, "up", cmd_up, "run everything: embedded Postgres, conductor, bots, console"
    )
    sp.add_argument("--no-console", action="store_true")
    sp.add_argument(
        "--port", type=int, help="console port (default $THREADLINE_CONSOLE_PORT, else 5006)"
    )
    sp.add_argument("--no-hooks", action="store_true", help="do not start the webhook ingress")
    sp.add_argument(
        "--hooks-port",
        type=int,
        default=None,
        help=f"webhook ingress port (default $THREADLINE_HOOKS_PORT, else {DEFAULT_PORT} or a free "
        "one if taken)",
    )
    sp.add_argument(
        "--no-auth",
        action="store_true",
        help="console without sign-in (loopback only): anyone on this machine acts as you",
    )
    sp = add_command(sub, "conductor", cmd_conductor, "run a conductor process")
    sp.epilog = (
        "THREADLINE_CONDUCTOR_HOLD_MS (default 100; 0: off): how long an idle executor holds a "
        "run after its instruction, for the step's done event, instead of parking it"
    )
    sp.add_argument(
        "--threads",
        type=int,
        default=None,
        help="runs handled at once, each on its own connection (default 4, "
        "or THREADLINE_CONDUCTOR_THREADS)",
    )
    sp = add_command(sub, "bots", cmd_bots, "run a bot process")
    sp.epilog = (
        "THREADLINE_WORKDIRS (colon-separated absolute directories; default none): where a "
        "recipe's absolute workdir may lie, an existing directory used as it is; a relative "
        "workdir lies inside the run's own directory. The account's home, the installation, "
        "THREADLINE_HOME and the runs root are never a workdir (an entry overlapping one stops "
        "the process at start-up)."
    )
    sp.add_argument("--concurrency", type=int, default=None, help="steps run at once (default 4)")
    sp.add_argument("--bot", action="append", help="serve only this bot (repeatable; default all)")
    sp = add_command(sub, "hooks", cmd_hooks, "serve webhooks: POST /hooks/<path> starts a run")
    sp.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; another needs every webhook signed)",
    )
    sp.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    sp.add_argument(
        "--max-bytes",
        type=int,
        default=MAX_BYTES,
        help=f"largest body accepted (default {MAX_BYTES} bytes)",
    )
    sp.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE_S,
        help=f"seconds a signed timestamp may be off (default {TOLERANCE_S:g})",
    )
    sp.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT_S,
        help="seconds from a request's first byte to the end of its body "
        f"(default {REQUEST_TIMEOUT_S:g})",
    )
    sp.add_argument(
        "--idle-timeout",
        type=float,
        default=IDLE_TIMEOUT_S,
        help=f"seconds a connection may wait for its next request (default {IDLE_TIMEOUT_S:g})",
    )
    sp.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        help=f"connections open at once; more are answered 503 (default {MAX_CONNECTIONS})",
    )
    sp = add_command(sub, "console", cmd_console, "serve the web console")
    sp.add_argument("--port", type=int, default=5006)
    sp.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to listen on; anything but loopback needs THREADLINE_COOKIE_SECRET",
    )
    sp.add_argument(
        "--no-auth",
        action="store_true",
        help="no sign-in (loopback only): anyone on this machine acts as you",
    )
    sp.add_argument("--no-link", action="store_true", help="do not print a sign-in link at start")
    cp = sp.add_subparsers(dest="console_command", metavar="SUBCOMMAND")
    lp = cp.add_parser("link", help="print a fresh one-time sign-in link for your account")
    lp.set_defaults(fn=cmd_console_link)
    lp.add_argument(
        "--port", type=int, default=5006, dest="link_port", help="the console's port (default 5006)"
    )
    lp.add_argument("--host", default="127.0.0.1", help="the host in the link (default 127.0.0.1)")
    lp.add_argument("--minutes", type=int, default=60, help="how long the link works (default 60)")
    up_ = cp.add_parser("user", help="console users").add_subparsers(
        dest="user_command", required=True
    )
    ap = up_.add_parser(
        "add", help="set a user's console password and roles (asks for the password)"
    )
    ap.set_defaults(fn=cmd_console_user_add)
    ap.add_argument("name")
    ap.add_argument(
        "--role",
        action="append",
        required=True,
        choices=["viewer", "operator", "approver"],
        help="repeatable",
    )
    ap.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    rp = up_.add_parser("remove", help="remove a user's console password (ends their sessions)")
    rp.set_defaults(fn=cmd_console_user_remove)
    rp.add_argument("name")

    dbp = sub.add_parser("db", help="database commands").add_subparsers(
        dest="db_command", required=True
    )
    mp = dbp.add_parser("migrate", help="apply migrations")
    mp.add_argument(
        "--engine",
        choices=["plain", "specialised"],
        help="specialised: Absurd's runtime functions run static statements for Threadline's"
        " queue, from now on; plain: as Absurd wrote them (the default)",
    )
    mp.set_defaults(fn=cmd_db_migrate)
    sp = dbp.add_parser("url", help="print the database URL (the owner's, or a process role's)")
    sp.add_argument(
        "--role",
        choices=["conductor", "bots", "console", "hooks", "viewer"],
        help="the login of this process kind (made by `db migrate`)",
    )
    sp.set_defaults(fn=cmd_db_url)
