"""`threadline health | price | cleanup | retention | limits`: keeping an installation
running: liveness, what models cost, how long finished runs are kept, concurrency caps."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine_adapter.cli.common import (
    AS_HELP,
    _actor,
    _conn,
    _print,
    _print_rows,
    add_command,
    add_sub,
)


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


def register(sub: Any) -> None:
    add_command(
        sub, "health", cmd_health, "conductor and bot liveness; exit 0 only when ok", json_flag=True
    )
    mp = sub.add_parser("price", help="what models cost (per million tokens)").add_subparsers(
        dest="price_command", required=True, metavar="COMMAND"
    )
    sp = mp.add_parser("set", help="set MODEL's price in USD per million tokens")
    sp.add_argument("model")
    sp.add_argument("--input", type=float, required=True, help="USD per million tokens in")
    sp.add_argument("--output", type=float, required=True, help="USD per million tokens out")
    sp.set_defaults(fn=cmd_price)
    add_sub(mp, "remove", cmd_price, "forget MODEL's price", "model")
    add_sub(mp, "list", cmd_price, "list model prices", json="print JSON")
    sp = add_command(
        sub,
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
    add_sub(ls, "remove", cmd_limits, "lift SCOPE's cap (queued runs that now fit start)", "scope")
