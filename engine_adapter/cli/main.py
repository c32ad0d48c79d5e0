"""The `threadline` command. Read commands take --json; errors name the problem and exit
non-zero."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine_adapter.model.errors import Invalid, Refused
from engine_adapter.model.vocab import AuthorKind, TriggerKind

EXIT_INVALID = 10  # recipe validate: the recipe is invalid
EXIT_DATABASE = 3  # the database refused or failed (one line, no traceback)
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


def _actor(args: argparse.Namespace) -> Any:
    """The CLI acts as the OS account running it; --as NAME records an action for someone else."""
    from engine_adapter.model.identity import cli_actor

    return cli_actor(getattr(args, "as_", None))


def _run_id(conn: Any, args: argparse.Namespace) -> str:
    """The full id of the run args.run_id names: the id, or a unique prefix of 8+ characters."""
    from engine_adapter.runs.run_ids import resolve_run_id

    return resolve_run_id(conn, args.run_id)


def _caller(args: argparse.Namespace) -> dict[str, str]:
    """A manual run's initiator as its trigger records it (its gates refuse the initiator)."""
    return _actor(args).as_caller()


# -- commands --------------------------------------------------------------------------------------
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
    from console.app import serve

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
        token = tokens.mint(threadline_home(), os_user(), ttl_s=args.minutes * 60)
    except OSError as err:  # another account: Threadline's home is not theirs to write
        raise Refused(
            f"cannot mint a sign-in link in {threadline_home()}: {err.strerror}; run this as "
            "the account that runs Threadline"
        ) from None
    print(tokens.link(token, args.link_port, args.host))
    print(f"(signs in {os_user()} once, within {args.minutes} minutes)", file=sys.stderr)
    return 0


def cmd_console_user_add(args: argparse.Namespace) -> int:
    import getpass

    from console.users import USERS_ENV, add_user

    path = args.file or os.environ.get(USERS_ENV)
    if not path:
        raise Invalid(f"--file: no users file named (or set {USERS_ENV})")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise Invalid("the passwords differ; nothing written")
    with _conn() as conn:  # the authorization layer decides and audits (an admin's action)
        add_user(Path(path).expanduser(), args.name, password, args.role, (conn, _actor(args)))
    print(f"{args.name} ({', '.join(sorted(set(args.role)))}) written to {path}")
    return 0


def cmd_db_migrate(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from engine_adapter.access.authorization import sync_rules
    from engine_adapter.model.settings import DATABASE_URL_ENV, threadline_home
    from engine_adapter.store import db
    from engine_adapter.store.embedded import home_lock
    from engine_adapter.store.roles import ensure_logins
    from engine_adapter.store.schema import migrate

    url = None if os.environ.get(DATABASE_URL_ENV) else _start_embedded_server()
    with (
        home_lock(threadline_home()) if url else nullcontext(),
        db.connect(url) as conn,  # the owner: the one process that may change the schema
    ):
        applied = migrate(conn)
        sync_rules(conn)
        ensure_logins(conn)
    print("applied: " + ", ".join(applied) if applied else "up to date")
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


def _warn_unknown_accounts(conn: Any, recipe: Any) -> list[str]:
    """Say (on stderr) which names in a recipe name no account: they match nobody."""
    from engine_adapter.access.accounts import warnings

    found = warnings(conn, recipe.to_dict())
    for line in found:
        print(f"threadline: warning: {line}", file=sys.stderr)
    return found


def _known_database() -> Any:
    """A connection when a database is configured and answering (never starts one); else None."""
    import psycopg

    from engine_adapter.model.settings import NotConfigured
    from engine_adapter.store import db

    try:
        return db.connect(role="console")
    except (NotConfigured, psycopg.OperationalError):
        return None


def _slug_given(arg: str | Path) -> str | None:
    """The workflow a SLUG|FILE argument names by its slug: one that is no file here."""
    from engine_adapter.cli.contract import names_a_workflow

    return str(arg) if names_a_workflow(str(arg)) and not Path(arg).exists() else None


def cmd_recipe_validate(args: argparse.Namespace) -> int:
    from engine_adapter.cli.contract import current_hash
    from engine_adapter.recipes.recipes import RecipeError, load_recipe_file

    slug = _slug_given(args.file)
    if slug:  # as `threadline run` takes it: the workflow's current version
        with _conn() as conn:
            digest = current_hash(conn, slug).removeprefix("sha256:")
        _print(
            args,
            {"valid": True, "slug": slug, "hash": digest},
            lambda v: f"{slug}: valid ({digest[:12]})",
        )
        return 0
    try:
        recipe = load_recipe_file(args.file)
    except RecipeError as err:
        _print(args, {"valid": False, "errors": err.errors}, lambda v: "\n".join(v["errors"]))
        return EXIT_INVALID
    conn = _known_database()
    if conn is not None:
        with conn:
            _warn_unknown_accounts(conn, recipe)
    _print(
        args,
        {"valid": True, "slug": recipe.slug, "hash": recipe.canonical_hash},
        lambda v: f"{v['slug']}: valid ({v['hash'][:12]})",
    )
    return 0


def cmd_recipe_apply(args: argparse.Namespace) -> int:
    from engine_adapter.catalog.workflows import apply_recipe
    from engine_adapter.recipes.recipes import RecipeError, load_recipe_file

    try:
        recipe = load_recipe_file(args.file)
        with _conn() as conn:
            # RecipeError too: a webhook path already taken
            applied = apply_recipe(conn, recipe, actor=_actor(args))
            _warn_unknown_accounts(conn, recipe)
    except RecipeError as err:
        print(str(err), file=sys.stderr)
        return EXIT_INVALID
    _print(
        args,
        applied.__dict__,
        lambda a: f"{a['slug']} v{a['version']}" + ("" if a["changed"] else " (unchanged)"),
    )
    return 0


def cmd_recipe_list(args: argparse.Namespace) -> int:
    from engine_adapter.catalog.workflows import list_workflows

    with _conn() as conn:
        rows = list_workflows(conn)
    _print_rows(
        args,
        rows,
        lambda r: f"{r['slug']:<24} v{r['version']:<3} {r['runs']:>5} runs  {r['name']}",
        "no workflows yet",
    )
    return 0


def cmd_bot_apply(args: argparse.Namespace) -> int:
    from engine_adapter.catalog.bot_config import apply_bots, load_bots_file
    from engine_adapter.recipes.recipes import RecipeError

    try:
        bots = load_bots_file(args.file)
    except RecipeError as err:
        print(str(err), file=sys.stderr)
        return EXIT_INVALID
    with _conn() as conn:
        apply_bots(conn, bots, _actor(args))
    _print(
        args,
        [b.to_dict() for b in bots],
        lambda bs: "\n".join(f"{b['name']}: {b['model']} at {b['base_url']}" for b in bs),
    )
    return 0


def cmd_bot_list(args: argparse.Namespace) -> int:
    from engine_adapter.catalog.bot_config import list_bots

    with _conn() as conn:
        rows = list_bots(conn)
    _print_rows(
        args,
        rows,
        lambda r: (
            f"{r['name']:<20} {r['model']:<28} {r['base_url']}  max_turns {r['max_turns']}"
            + (f"  key ${r['api_key_env']}" if r["api_key_env"] else "")
        ),
        "no agent bots yet",
    )
    return 0


def cmd_recipe_show(args: argparse.Namespace) -> int:
    from engine_adapter.catalog.workflows import get_workflow, list_versions, written_text

    with _conn() as conn:
        wf = get_workflow(conn, args.slug)
        wf["versions"] = list_versions(conn, args.slug)
        wf["text"] = written_text(conn, args.slug, wf["version"])  # as its author wrote it
    _print(
        args,
        wf,
        lambda w: (
            w["text"].rstrip("\n")
            + f"\n# v{w['version']} · {w['hash'][:12]} · {len(w['versions'])} versions"
        ),
    )
    return 0


def cmd_recipe_hash(args: argparse.Namespace) -> int:
    """The hash `threadline run` pins (workflow_hash): of SLUG's current version, or of FILE."""
    from engine_adapter.cli.contract import current_hash
    from engine_adapter.recipes.recipes import RecipeError, load_recipe_file

    slug = _slug_given(args.workflow)
    if slug:
        with _conn() as conn:
            digest = current_hash(conn, slug)
    else:
        try:
            digest = f"sha256:{load_recipe_file(Path(args.workflow)).canonical_hash}"
        except RecipeError as err:
            print(str(err), file=sys.stderr)
            return EXIT_INVALID
    print(digest)
    return 0


def cmd_recipe_history(args: argparse.Namespace) -> int:
    from engine_adapter.catalog import workflows

    with _conn() as conn:
        workflows.get_workflow(conn, args.slug)
        versions = workflows.list_versions(conn, args.slug)

    def line(v: dict[str, Any]) -> str:
        came = f" (a copy of v{v['rolled_back_from']})" if v["rolled_back_from"] else ""
        return (
            f"v{v['version']:<4} sha256:{v['hash'][:12]}  {v['source']:<9} "
            f"{v['created_at']:%Y-%m-%d %H:%M:%S}{came}"
        )

    _print_rows(args, versions, line, f"workflow {args.slug} has no versions")
    return 0


def cmd_recipe_diff(args: argparse.Namespace) -> int:
    from engine_adapter.catalog import workflows

    with _conn() as conn:
        print(workflows.diff_versions(conn, args.slug, args.a, args.b) or "(no difference)")
    return 0


def cmd_recipe_rollback(args: argparse.Namespace) -> int:
    from engine_adapter.catalog import workflows

    with _conn() as conn:
        applied = workflows.rollback(conn, args.slug, args.to, _actor(args))
        restored = workflows.get_version(conn, args.slug, applied.version)["rolled_back_from"]
    print(f"{args.slug}: v{applied.version}, a copy of v{restored}")
    return 0


def _payload(args: argparse.Namespace) -> Any:
    try:
        return json.loads(args.payload) if args.payload else {}
    except json.JSONDecodeError as err:
        raise Invalid(f"--payload: not valid JSON: {err}") from None


def cmd_spawn(args: argparse.Namespace) -> int:
    import uuid

    from engine_adapter.runs.spawn import manual_key, spawn

    payload = _payload(args)
    # A client request id makes a retried command (or a double-click) one run of this workflow.
    request_id = args.request_id or str(uuid.uuid4())
    with _conn() as conn:
        result = spawn(
            conn,
            args.slug,
            payload,
            idempotency_key=manual_key(args.slug, request_id),
            trigger={"kind": TriggerKind.MANUAL, **_caller(args), "request_id": request_id},
            actor=_actor(args),
        )
    value: dict[str, Any] = {"run_id": result.run_id, "created": result.created}
    if not args.request_id:
        value["request_id"] = request_id
        if not args.json:
            print(
                f"request id {request_id} (repeat with --request-id {request_id} to retry safely)",
                file=sys.stderr,
            )
    _print(
        args,
        value,
        lambda v: v["run_id"] + ("" if v["created"] else "  (existing run for this request id)"),
    )
    return 0


def cmd_emit(args: argparse.Namespace) -> int:
    from engine_adapter.runs.events import emit

    payload = _payload(args)
    with _conn() as conn:
        actor = _actor(args)
        emitted = emit(
            conn,
            args.name,
            payload,
            event_id=args.id,
            caller=actor.label,
            key=args.key,
            actor=actor,
        )
    value = {
        "event": emitted.name,
        "event_id": emitted.event_id,
        "key": emitted.key,
        "runs": [r.__dict__ for r in emitted.runs],
        "released": emitted.released,
        "paused": emitted.paused,
    }

    def text(v: dict[str, Any]) -> str:
        lines = [f"event {v['event']} id {v['event_id']}"]
        lines += [
            f"{r['run_id']}  {r['workflow']}"
            + ("" if r["created"] else "  (existing run for this event id)")
            for r in v["runs"]
        ]
        if v["paused"]:
            lines.append(f"no run started: {v['paused']}")
        elif not v["runs"]:
            lines.append(f"no enabled workflow has on_event: {v['event']}")
        n = len(v["released"])
        lines.append(
            f"{n} waiting step{'s' if n != 1 else ''} released"
            + ("" if n else " (a run that reaches a wait for it later will find it)")
        )
        return "\n".join(lines)

    _print(args, value, text)
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    from engine_adapter.runs import pause

    with _conn() as conn:
        if args.command == "pause":
            pause.pause(conn, _actor(args), args.reason)
            switch = pause.state(conn)
            assert switch is not None  # set just now
            print(pause.describe(switch))
        elif pause.unpause(conn, _actor(args)):
            print("unpaused: new runs start again")
        else:
            print("Threadline was not paused")
    return 0


def cmd_price(args: argparse.Namespace) -> int:
    from engine_adapter.catalog import bot_config

    with _conn() as conn:
        if args.price_command == "set":
            bot_config.set_price(conn, args.model, args.input, args.output, _actor(args))
            print(
                f"{args.model}: ${args.input:g} in, ${args.output:g} out per million tokens "
                "(runs spawned from now on)"
            )
        elif args.price_command == "remove":
            removed = bot_config.remove_price(conn, args.model, _actor(args))
            print(f"{args.model}: {'removed' if removed else 'had no price'}")
        else:
            _print_rows(
                args,
                bot_config.list_prices(conn),
                lambda p: f"{p['model']:<30} ${p['input']:g} in, ${p['output']:g} out per 1M",
                "no model prices (threadline price set MODEL --input USD --output USD)",
            )
    return 0


def cmd_limits(args: argparse.Namespace) -> int:
    from engine_adapter.runs import run_limits

    with _conn() as conn:
        command = getattr(args, "limits_command", None)
        if command == "set":
            admitted = run_limits.set_limit(conn, args.scope, args.max_runs, _actor(args))
            started = f"; {admitted} queued run(s) started" if admitted else ""
            print(f"{args.scope}: at most {args.max_runs} runs at once{started}")
        elif command == "remove":
            found, admitted = run_limits.remove_limit(conn, args.scope, _actor(args))
            started = f"; {admitted} queued run(s) started" if admitted else ""
            print(f"{args.scope}: {'removed' if found else 'had no limit'}{started}")
        else:
            _print_rows(
                args,
                run_limits.list_limits(conn),
                lambda lim: (
                    f"{lim['scope']:<30} {lim['active']} of {lim['max_runs']} active, "
                    f"{lim['queued']} queued  (set by {lim['set_by']})"
                ),
                "no global or initiator limits (threadline limits set global|initiator:NAME N); "
                "workflows may still set max_concurrent_runs",
            )
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    from engine_adapter.runs import retention

    with _conn() as conn:
        actor = _actor(args)
        report = retention.cleanup(conn, f"cli:{actor.name}", dry_run=args.dry_run, actor=actor)
        if report is None:
            print(
                "a cleanup is running elsewhere (a conductor's); try again later", file=sys.stderr
            )
            return 1
        _print(args, report.to_dict(), lambda _: report.line())
    return 0


def cmd_retention(args: argparse.Namespace) -> int:
    from engine_adapter.runs import retention

    with _conn() as conn:
        if getattr(args, "retention_command", None) == "set":
            retention.set_default(conn, args.key, args.duration, _actor(args))
        current = retention.defaults(conn)
        _print(
            args,
            current,
            lambda d: (
                f"finished runs are kept {d['runs']}, their streamed output {d['output']} "
                f"(unless a workflow's retention says otherwise; set by {d['set_by']})\n"
                + retention.describe_last(retention.last(conn))
            ),
        )
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from engine_adapter.access import api_tokens

    with _conn() as conn:
        if args.token_command == "create":
            by = _actor(args)
            token = api_tokens.create(conn, args.account, args.role, by, args.name)
            print(token)
            delegated = "" if args.account == by.name else f", minted by {by.name}"
            print(
                f"token {args.name or args.account} acts as {args.account} "
                f"({', '.join(sorted(set(args.role)))}{delegated}): shown once, kept only as a "
                "hash; send it as `Authorization: Bearer <token>`",
                file=sys.stderr,
            )
        elif args.token_command == "revoke":
            api_tokens.revoke(conn, args.name, _actor(args))
            print(f"revoked {args.name}")
        else:
            _print_rows(
                args,
                api_tokens.list_tokens(conn),
                lambda t: (
                    f"{t['name']:<20} as {t['account'] or '?':<16} {','.join(t['roles']):<25} "
                    + (f"minted by {t['minted_by']}  " if t["minted_by"] != t["account"] else "")
                    + (
                        "revoked"
                        if t["revoked_at"]
                        else f"last used {t['last_used_at'] or 'never'}"
                    )
                ),
                "no API tokens (threadline token create ACCOUNT --role viewer)",
            )
    return 0


def cmd_user(args: argparse.Namespace) -> int:
    from engine_adapter.access import accounts

    by = _actor(args)
    with _conn() as conn:
        if args.user_command == "add":
            channels = [("email", a) for a in args.email] + [("webhook", u) for u in args.webhook]
            account = accounts.add(conn, args.name, by, channels)
            print(
                f"account {args.name} (id {account})" + "".join(f", {c} {t}" for c, t in channels)
            )
        elif args.user_command == "remove":
            revoked = accounts.remove(conn, args.name, by)
            print(
                f"removed account {args.name}"
                + (f"; revoked its tokens {', '.join(revoked)}" if revoked else "")
            )
        elif args.user_command == "channel":
            channel, target = ("email", args.email) if args.email else ("webhook", args.webhook)
            if args.channel_command == "add":
                added = accounts.add_channel(conn, args.name, channel, target, by)
                print(f"{args.name}: {channel} {target}" + ("" if added else " (already there)"))
            else:
                accounts.remove_channel(conn, args.name, channel, target, by)
                print(f"{args.name}: {channel} {target} removed")
        else:
            _print_rows(
                args,
                accounts.list_accounts(conn),
                lambda a: (
                    f"{a['name']:<20} id {a['id']:<5} {a['tokens']} token(s)  "
                    + (
                        ", ".join(f"{c['channel']} {c['target']}" for c in a["channels"])
                        or "no channels"
                    )
                ),
                "no accounts yet (threadline user add NAME)",
            )
    return 0


def cmd_proposal(args: argparse.Namespace) -> int:
    from engine_adapter.catalog import proposals

    with _conn() as conn:
        if args.proposal_command == "list":
            _print_rows(
                args,
                proposals.list_proposals(conn, args.workflow),
                lambda p: (
                    f"#{p['id']:<5} {p['workflow']:<20} {p['status']:<9} {p['risk']:<6} "
                    f"{p['summary'][:60]}"
                ),
                "no proposals",
            )
        elif args.proposal_command == "show":
            _print(
                args,
                proposals.get(conn, args.id),
                lambda p: (
                    f"proposal #{p['id']} of {p['workflow']}: {p['status']}, risk "
                    f"{p['risk']} ({'; '.join(p['risk_reasons'])})\nby {p['proposed_by']}: "
                    f"{p['summary']}\n{p['diff']}"
                ),
            )
        elif args.proposal_command == "apply":
            version = proposals.apply(conn, args.id, _actor(args))
            print(f"applied proposal #{args.id}: version {version}")
        else:
            approve = args.proposal_command == "approve"
            proposals.review(conn, args.id, approve, _actor(args), args.note)
            print(f"{'approved' if approve else 'rejected'} proposal #{args.id}")
    return 0


def cmd_schedule_list(args: argparse.Namespace) -> int:
    from engine_adapter.runs.schedules import schedule_list

    with _conn() as conn:
        rows = schedule_list(conn)

    def text(rs: list[dict[str, Any]]) -> str:
        lines = []
        for r in rs:
            state = "" if r["enabled"] else "  (disabled)"
            lines.append(
                f"{r['workflow']}  {r['schedule']}  {r['description']}"
                f"  catch_up {r['catch_up']}{state}"
            )
            lines += [f"    next {t}" for t in r["next_local"]]
        return "\n".join(lines) or "no schedules: add `schedule:` to a recipe"

    _print(args, rows, text)
    return 0


def cmd_recipe_enable(args: argparse.Namespace) -> int:
    from engine_adapter.catalog.workflows import set_enabled

    enabled = args.recipe_command == "enable"
    with _conn() as conn:
        set_enabled(conn, args.slug, enabled, _actor(args))
    print(f"{args.slug} {'enabled' if enabled else 'disabled'}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from engine_adapter.read.read_model import health
    from engine_adapter.read.run_list import RunFilters, runs_page

    filters = RunFilters(workflow=args.workflow, state=args.state)
    filters.check()
    with _conn() as conn:
        h = health(conn)
        rows = runs_page(conn, filters, limit=args.limit).rows
    value = {"health": h["status"], "runs": [r.to_json() for r in rows]}

    def text(v: dict[str, Any]) -> str:
        lines = [f"health: {v['health']}"]
        lines += [
            f"{r.run_id}  {r.workflow:<20} {r.state:<10} {r.current_step or '':<14} "
            f"{r.created_at:%Y-%m-%d %H:%M:%S}"
            for r in rows
        ]
        if rows:
            return "\n".join(lines)
        if filters.state or filters.workflow:  # runs there may be, none of them matches
            wanted = ", ".join(
                f"{k} {v}" for k, v in (("workflow", args.workflow), ("state", args.state)) if v
            )
            return "\n".join([*lines, f"no run matches the filter ({wanted})"])
        return "\n".join([*lines, "no runs yet: `threadline spawn SLUG`"])

    _print(args, value, text)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from engine_adapter.read import step_report, step_tree
    from engine_adapter.read.read_model import show_run

    with _conn() as conn:
        run = show_run(conn, _run_id(conn, args))

    def text(r: dict[str, Any]) -> str:
        lines = [f"run {r['run_id']} · {r['workflow']} v{r['workflow_version']} · {r['state']}", ""]
        for depth, s in step_tree.flatten(r["steps"]):
            name = "  " * depth + s["id"]
            line = f"  {s['status']:<10} {name:<16} {s['kind']:<13}"
            if s["kind"] not in ("branch", "iteration"):
                line += f" attempts {s.get('attempts', 0)}"
            if s.get("reason"):
                line += f" ({s['reason']})"
            lines.append(line.rstrip())
            lines += step_report.detail_lines(s, " " * (13 + 2 * depth))
        if r.get("outputs"):
            lines += ["", "outputs:"] + [
                f"  {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in r["outputs"].items()
            ]
        lines.append("")
        for e in r["thread"]:
            who = e["author"] if e["author_kind"] != AuthorKind.SYSTEM else "System"
            lines.append(f"#{e['seq']:<3} {who} [{e['kind']}] {e['text'].rstrip()}")
        return "\n".join(lines)

    _print(args, run, text)
    return 0


def cmd_reply(args: argparse.Namespace) -> int:
    from engine_adapter.runs.gates import reply

    with _conn() as conn:
        outcome = reply(conn, _run_id(conn, args), args.text, _actor(args))
    _print(
        args,
        outcome.__dict__,
        lambda o: (
            f"entry #{o['seq']}"
            + (f" · gate {o['decision']}" if o["decision"] else "")
            + (f"\n{o['hint']}" if o["hint"] else "")
        ),
    )
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    from engine_adapter.runs.gates import decide

    with _conn() as conn:
        run_id = _run_id(conn, args)
        key = decide(conn, run_id, args.command, _actor(args), args.reason, gate_key=args.gate)
    print(f"{args.command}d gate {key}" if args.command == "approve" else f"denied gate {key}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from engine_adapter.runs.commands import cancel_run

    with _conn() as conn:
        run_id = _run_id(conn, args)
        cancel_run(conn, run_id, _actor(args), args.reason)
    print(f"cancelled {run_id}")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    from engine_adapter.runs.commands import retry_run

    with _conn() as conn:
        key = retry_run(conn, _run_id(conn, args), _actor(args))
    print(f"retrying {key}")
    return 0


def cmd_rerun(args: argparse.Namespace) -> int:
    from engine_adapter.conductor.reruns import rerun

    payload = _payload(args) if args.payload is not None else None
    with _conn() as conn:
        original = _run_id(conn, args)
        spawned = rerun(conn, original, args.from_step, _actor(args), payload)
    _print(
        args,
        {"run_id": spawned.run_id, "rerun_of": original, "from": args.from_step},
        lambda v: f"{v['run_id']}  (rerun of {v['rerun_of']} from step {v['from']})",
    )
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from engine_adapter.catalog.bot_backends import missing_line
    from engine_adapter.read.read_model import health

    with _conn() as conn:
        h = health(conn)

    def text(v: dict[str, Any]) -> str:
        lines = [f"status: {v['status']}  (runnable unclaimed: {v['runnable_unclaimed']})"]
        for kind in ("conductors", "bots"):
            for w in v[kind]:
                said = "alive" if w["alive"] else "stopped" if w["stopped"] else "DEAD"
                lines.append(
                    f"  {kind[:-1]:<9} {said:<7} {w['id']}  beat {w['last_beat_age_s']}s ago"
                )
                if kind == "bots" and w["alive"] and w["sandbox"]:
                    lines.append(f"            steps run {w['sandbox']}")
        if v["unsandboxed_bots"]:
            lines.append(
                f"WARNING: {len(v['unsandboxed_bots'])} bot process(es) run steps UNSANDBOXED"
            )
        if v["paused"]:
            lines.append(f"PAUSED: {v['paused']}")
        if missing := missing_line(v["bots_without_backend"]):
            lines.append(missing)
        return "\n".join(lines)

    _print(args, h, text)
    return 0 if h["status"] == "ok" else 1


# -- parser ----------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from engine_adapter.ingress.hooks import (
        DEFAULT_PORT,
        IDLE_TIMEOUT_S,
        MAX_BYTES,
        MAX_CONNECTIONS,
        REQUEST_TIMEOUT_S,
    )
    from engine_adapter.ingress.webhook_auth import TOLERANCE_S

    p = argparse.ArgumentParser(
        prog="threadline", description="Durable workflows where every run is a thread."
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, fn: Callable[[argparse.Namespace], int], help: str, json_flag: bool = False
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.set_defaults(fn=fn)
        if json_flag:
            sp.add_argument("--json", action="store_true", help="print JSON")
        return sp

    sp = add("up", cmd_up, "run everything: embedded Postgres, conductor, bots, console")
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
    sp = add("conductor", cmd_conductor, "run a conductor process")
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
    sp = add("bots", cmd_bots, "run a bot process")
    sp.epilog = (
        "THREADLINE_WORKDIRS (colon-separated absolute directories; default none): where a "
        "recipe's absolute workdir may lie, an existing directory used as it is; a relative "
        "workdir lies inside the run's own directory. The account's home, the installation, "
        "THREADLINE_HOME and the runs root are never a workdir (an entry overlapping one stops "
        "the process at start-up)."
    )
    sp.add_argument("--concurrency", type=int, default=None, help="steps run at once (default 4)")
    sp.add_argument("--bot", action="append", help="serve only this bot (repeatable; default all)")
    sp = add("hooks", cmd_hooks, "serve webhooks: POST /hooks/<path> starts a run")
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
    sp = add("console", cmd_console, "serve the web console")
    sp.add_argument("--port", type=int, default=5006)
    sp.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to listen on; anything but loopback needs a users file",
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
        "add", help="add or replace a user of the users file (asks for the password)"
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
    ap.add_argument("--file", help="the users file (default: $THREADLINE_CONSOLE_USERS)")
    ap.add_argument("--password-stdin", action="store_true", help="read the password from stdin")

    dbp = sub.add_parser("db", help="database commands").add_subparsers(
        dest="db_command", required=True
    )
    dbp.add_parser("migrate", help="apply migrations").set_defaults(fn=cmd_db_migrate)
    sp = dbp.add_parser("url", help="print the database URL (the owner's, or a process role's)")
    sp.add_argument(
        "--role",
        choices=["conductor", "bots", "console", "hooks", "viewer"],
        help="the login of this process kind (made by `db migrate`)",
    )
    sp.set_defaults(fn=cmd_db_url)

    rp = sub.add_parser("recipe", help="workflow recipes").add_subparsers(
        dest="recipe_command", required=True
    )
    for name, fn, hlp in (
        ("apply", cmd_recipe_apply, "create or update a workflow from FILE"),
        (
            "validate",
            cmd_recipe_validate,
            "check FILE (or SLUG's current version); exit 10 with the errors when invalid",
        ),
    ):
        sp = rp.add_parser(name, help=hlp)
        sp.add_argument("file", type=Path)
        sp.add_argument("--json", action="store_true")
        sp.set_defaults(fn=fn)
    bp = sub.add_parser("bot", help="agent bots (model endpoints)").add_subparsers(
        dest="bot_command", required=True
    )
    sp = bp.add_parser("apply", help="create or update the agent bots of FILE (YAML)")
    sp.add_argument("file", type=Path)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_bot_apply)
    sp = bp.add_parser("list", help="list agent bots")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_bot_list)
    sp = rp.add_parser("list", help="list workflows")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_recipe_list)
    sp = rp.add_parser("show", help="show a workflow's recipe")
    sp.add_argument("slug")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_recipe_show)
    sp = rp.add_parser(
        "hash",
        help="the hash of SLUG's current version (or of a recipe FILE), as `threadline run` "
        "pins it in workflow_hash",
    )
    sp.add_argument("workflow", metavar="SLUG|FILE")
    sp.set_defaults(fn=cmd_recipe_hash)
    sp = rp.add_parser("history", help="a workflow's versions: number, hash, source, time")
    sp.add_argument("slug")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_recipe_history)
    sp = rp.add_parser("diff", help="what changed between two versions (number or hash prefix)")
    sp.add_argument("slug")
    sp.add_argument("a")
    sp.add_argument("b")
    sp.set_defaults(fn=cmd_recipe_diff)
    sp = rp.add_parser("rollback", help="a new version equal to an earlier one")
    sp.add_argument("slug")
    sp.add_argument("--to", required=True, help="the version: its number or hash prefix")
    sp.set_defaults(fn=cmd_recipe_rollback)
    for name, hlp in (
        ("enable", "let schedules, events and webhooks start runs of SLUG again"),
        ("disable", "stop schedules, events and webhooks from starting runs of SLUG"),
    ):
        sp = rp.add_parser(name, help=hlp)
        sp.add_argument("slug")
        sp.set_defaults(fn=cmd_recipe_enable)

    sp = add("spawn", cmd_spawn, "start a run of workflow SLUG; prints the run id", json_flag=True)
    sp.add_argument("slug")
    sp.add_argument("--payload", help="JSON object")
    sp.add_argument(
        "--request-id",
        "--idempotency-key",
        dest="request_id",
        help="client request id: repeating it makes no second run (default: a fresh one, printed)",
    )
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp = add(
        "emit",
        cmd_emit,
        "emit event NAME: one run of each workflow with on_event: NAME, and the end of every "
        "wait_for_event step waiting for it",
        json_flag=True,
    )
    sp.add_argument("name")
    sp.add_argument("--payload", help="JSON object")
    sp.add_argument(
        "--id", help="event id: emitting it again starts no second run (default: a fresh one)"
    )
    sp.add_argument(
        "--key", help="correlation key: ends the wait_for_event steps waiting with this key"
    )
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    scp = sub.add_parser("schedule", help="schedules").add_subparsers(
        dest="schedule_command", required=True
    )
    sp = scp.add_parser("list", help="each schedule in words with its next fire times")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_schedule_list)
    sp = add("runs", cmd_runs, "list runs, leading with health", json_flag=True)
    sp.add_argument("--workflow")
    sp.add_argument("--state")
    sp.add_argument("--limit", type=int, default=50)
    sp = add("show", cmd_show, "a run: its steps and its thread", json_flag=True)
    sp.add_argument("run_id")
    sp = add("reply", cmd_reply, "reply in a run's thread as a human", json_flag=True)
    sp.add_argument("run_id")
    sp.add_argument("text")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    for name in ("approve", "deny"):
        sp = add(name, cmd_decide, f"{name} the gate a run waits at")
        sp.add_argument("run_id")
        sp.add_argument("--reason")
        sp.add_argument(
            "--gate", help="the gate's step key; refused if that gate is no longer open"
        )
        sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp = add("cancel", cmd_cancel, "cancel a run (stops a running command)")
    sp.add_argument("run_id")
    sp.add_argument("--reason")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp = add("retry", cmd_retry, "resume a failed run at its failed step")
    sp.add_argument("run_id")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp = add(
        "rerun",
        cmd_rerun,
        "a new run of the same recipe version from STEP on; the steps before it are carried "
        "over from the original run, never run again",
        json_flag=True,
    )
    sp.add_argument("run_id")
    sp.add_argument("--from", dest="from_step", required=True, metavar="STEP")
    sp.add_argument("--payload", help="JSON object (default: the original run's payload)")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    add("health", cmd_health, "conductor and bot liveness; exit 0 only when ok", json_flag=True)
    mp = sub.add_parser("price", help="what models cost (per million tokens)").add_subparsers(
        dest="price_command", required=True, metavar="COMMAND"
    )
    sp = mp.add_parser("set", help="set MODEL's price in USD per million tokens")
    sp.add_argument("model")
    sp.add_argument("--input", type=float, required=True, help="USD per million tokens in")
    sp.add_argument("--output", type=float, required=True, help="USD per million tokens out")
    sp.set_defaults(fn=cmd_price)
    sp = mp.add_parser("remove", help="forget MODEL's price")
    sp.add_argument("model")
    sp.set_defaults(fn=cmd_price)
    sp = mp.add_parser("list", help="list model prices")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(fn=cmd_price)
    sp = add(
        "cleanup",
        cmd_cleanup,
        "remove finished runs and output past their retention now",
        json_flag=True,
    )
    sp.add_argument("--dry-run", action="store_true", help="count what would go; remove nothing")
    kept = sub.add_parser("retention", help="how long finished runs and their output are kept")
    kept.add_argument("--json", action="store_true", help="print JSON")
    kept.set_defaults(fn=cmd_retention)
    rs = kept.add_subparsers(dest="retention_command", metavar="COMMAND")
    sp = rs.add_parser("set", help="the global default of runs or output (a workflow may differ)")
    sp.add_argument("key", choices=("runs", "output"))
    sp.add_argument("duration", help="e.g. 180d, 30d, 12h")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp.set_defaults(fn=cmd_retention)
    lp = sub.add_parser("limits", help="concurrency caps: global and per initiator")
    lp.add_argument("--json", action="store_true", help="print JSON")
    lp.set_defaults(fn=cmd_limits)
    ls = lp.add_subparsers(dest="limits_command", metavar="COMMAND")
    sp = ls.add_parser("set", help="at most MAX top-level runs at once under SCOPE")
    sp.add_argument("scope", help="global, or initiator:NAME (who started the runs)")
    sp.add_argument("max_runs", type=int, metavar="MAX")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp.set_defaults(fn=cmd_limits)
    sp = ls.add_parser("remove", help="lift SCOPE's cap (queued runs that now fit start)")
    sp.add_argument("scope")
    sp.set_defaults(fn=cmd_limits)
    tp = sub.add_parser("token", help="bearer tokens of the HTTP API").add_subparsers(
        dest="token_command", required=True, metavar="COMMAND"
    )
    sp = tp.add_parser(
        "create",
        help="a new token acting as ACCOUNT (printed once); for another account than yours, "
        "an admin's action, shown as delegated wherever the token acts",
    )
    sp.add_argument("account")
    sp.add_argument(
        "--role", action="append", required=True, choices=("viewer", "operator", "approver")
    )
    sp.add_argument("--name", help="the token's label for list and revoke (default: ACCOUNT)")
    sp.set_defaults(fn=cmd_token)
    sp = tp.add_parser("revoke", help="revoke the live token labelled NAME")
    sp.add_argument("name")
    sp.set_defaults(fn=cmd_token)
    sp = tp.add_parser("list", help="list tokens (never their values)")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(fn=cmd_token)
    up_ = sub.add_parser(
        "user", help="accounts: who approves, decides and is notified"
    ).add_subparsers(dest="user_command", required=True, metavar="COMMAND")
    sp = up_.add_parser("add", help="add account NAME (admin), with channels for its links")
    sp.add_argument("name")
    sp.add_argument("--email", action="append", default=[], help="repeatable")
    sp.add_argument("--webhook", action="append", default=[], help="repeatable")
    sp.set_defaults(fn=cmd_user)
    sp = up_.add_parser("remove", help="remove account NAME (admin); its tokens are revoked")
    sp.add_argument("name")
    sp.set_defaults(fn=cmd_user)
    sp = up_.add_parser("list", help="accounts with their channels")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(fn=cmd_user)
    cp_ = up_.add_parser(
        "channel", help="where an account's resume links go (your own, or any as an admin)"
    ).add_subparsers(dest="channel_command", required=True, metavar="COMMAND")
    for name in ("add", "remove"):
        sp = cp_.add_parser(name, help=f"{name} a channel of account NAME")
        sp.add_argument("name")
        one = sp.add_mutually_exclusive_group(required=True)
        one.add_argument("--email")
        one.add_argument("--webhook")
        sp.set_defaults(fn=cmd_user)
    pp = sub.add_parser("proposal", help="proposed workflow changes").add_subparsers(
        dest="proposal_command", required=True, metavar="COMMAND"
    )
    sp = pp.add_parser("list", help="proposals, newest first")
    sp.add_argument("--workflow")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(fn=cmd_proposal)
    for name, hlp in (
        ("show", "a proposal with its risk and diff"),
        ("approve", "approve an open proposal (an approver, not its proposer)"),
        ("reject", "reject an open proposal, with a note"),
        ("apply", "apply an approved proposal as a new version (fails if stale)"),
    ):
        sp = pp.add_parser(name, help=hlp)
        sp.add_argument("id", type=int)
        if name == "show":
            sp.add_argument("--json", action="store_true", help="print JSON")
        if name in ("approve", "reject"):
            sp.add_argument("--note", required=name == "reject")
        sp.set_defaults(fn=cmd_proposal)
    sp = add("pause", cmd_pause, "refuse new runs (runs in flight go on) until unpause")
    sp.add_argument("--reason", help="said to whoever tries to start a run")
    add("unpause", cmd_pause, "start new runs again")
    from engine_adapter.cli.contract_cli import add_commands
    from engine_adapter.cli.reset import add_reset

    add_commands(sub)
    add_reset(sub)
    return p


def database_error_line(err: Exception) -> str:
    """A database error in one line: its first line, its kind and SQLSTATE."""
    first = (str(err).strip().splitlines() or [""])[0]
    state = getattr(err, "sqlstate", None)
    kind = type(err).__name__ + (f" {state}" if state else "")
    return f"database error ({kind}): {first or 'no message'}"


def main(argv: list[str] | None = None) -> int:
    import psycopg

    args = build_parser().parse_args(argv)
    # Each process names itself to Postgres (pg_stat_activity, the server's log): libpq reads it.
    from engine_adapter.model.errors import INTERNAL, ThreadlineError
    from engine_adapter.model.settings import application_name

    os.environ["PGAPPNAME"] = application_name(args.fn.__name__.removeprefix("cmd_"))
    try:
        return args.fn(args)
    except ThreadlineError as err:  # meant for a person: its message, its kind's exit code
        print(f"threadline: {err}", file=sys.stderr)
        return err.exit_code
    except psycopg.Error as err:
        # The database refused or failed: one line naming it (its class keeps a bug of ours
        # recognisable); anything else that is not ours to explain still shows its traceback.
        print(f"threadline: {database_error_line(err)}", file=sys.stderr)
        return EXIT_DATABASE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `threadline show RUN | head`: the reader has gone, which is no error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE
    except Exception:  # a bug of ours: its traceback, then one line that says so
        traceback.print_exc()
        print(f"threadline: {INTERNAL.message}; its traceback is above", file=sys.stderr)
        return INTERNAL.exit_code


if __name__ == "__main__":
    sys.exit(main())
