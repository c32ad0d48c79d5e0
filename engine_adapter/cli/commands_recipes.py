"""`threadline recipe ... | bot ...`: workflows (validate, apply, list, show, hash, history,
diff, rollback, enable, disable) and the agent bots their steps name."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine_adapter.cli.common import (
    EXIT_INVALID,
    _actor,
    _conn,
    _print,
    _print_listing,
    _print_rows,
    add_sub,
)


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

    return _print_listing(
        args,
        list_workflows,
        lambda r: f"{r['slug']:<24} v{r['version']:<3} {r['runs']:>5} runs  {r['name']}",
        "no workflows yet",
    )


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

    return _print_listing(
        args,
        list_bots,
        lambda r: (
            f"{r['name']:<20} {r['model']:<28} {r['base_url']}  max_turns {r['max_turns']}"
            + (f"  key ${r['api_key_env']}" if r["api_key_env"] else "")
        ),
        "no agent bots yet",
    )


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


def cmd_recipe_enable(args: argparse.Namespace) -> int:
    from engine_adapter.catalog.workflows import set_enabled

    enabled = args.recipe_command == "enable"
    with _conn() as conn:
        set_enabled(conn, args.slug, enabled, _actor(args))
    print(f"{args.slug} {'enabled' if enabled else 'disabled'}")
    return 0


def register(sub: Any) -> None:
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
    add_sub(bp, "list", cmd_bot_list, "list agent bots", json=None)
    add_sub(rp, "list", cmd_recipe_list, "list workflows", json=None)
    add_sub(rp, "show", cmd_recipe_show, "show a workflow's recipe", "slug", json=None)
    sp = rp.add_parser(
        "hash",
        help="the hash of SLUG's current version (or of a recipe FILE), as `threadline run` "
        "pins it in workflow_hash",
    )
    sp.add_argument("workflow", metavar="SLUG|FILE")
    sp.set_defaults(fn=cmd_recipe_hash)
    add_sub(
        rp,
        "history",
        cmd_recipe_history,
        "a workflow's versions: number, hash, source, time",
        "slug",
        json=None,
    )
    add_sub(
        rp,
        "diff",
        cmd_recipe_diff,
        "what changed between two versions (number or hash prefix)",
        "slug",
        "a",
        "b",
    )
    sp = rp.add_parser("rollback", help="a new version equal to an earlier one")
    sp.add_argument("slug")
    sp.add_argument("--to", required=True, help="the version: its number or hash prefix")
    sp.set_defaults(fn=cmd_recipe_rollback)
    for name, hlp in (
        ("enable", "let schedules, events and webhooks start runs of SLUG again"),
        ("disable", "stop schedules, events and webhooks from starting runs of SLUG"),
    ):
        add_sub(rp, name, cmd_recipe_enable, hlp, "slug")
