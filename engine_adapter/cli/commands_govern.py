"""`threadline token | user | proposal | pause | unpause`: who may act (accounts and their
channels, API tokens), reviewing proposed workflow changes, and refusing new runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine_adapter.cli.common import _actor, _conn, _print, _print_rows, add_command, add_sub


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


def register(sub: Any) -> None:
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
    add_sub(tp, "revoke", cmd_token, "revoke the live token labelled NAME", "name")
    add_sub(tp, "list", cmd_token, "list tokens (never their values)", json="print JSON")
    up_ = sub.add_parser(
        "user", help="accounts: who approves, decides and is notified"
    ).add_subparsers(dest="user_command", required=True, metavar="COMMAND")
    sp = up_.add_parser("add", help="add account NAME (admin), with channels for its links")
    sp.add_argument("name")
    sp.add_argument("--email", action="append", default=[], help="repeatable")
    sp.add_argument("--webhook", action="append", default=[], help="repeatable")
    sp.set_defaults(fn=cmd_user)
    add_sub(up_, "remove", cmd_user, "remove account NAME (admin); its tokens are revoked", "name")
    add_sub(up_, "list", cmd_user, "accounts with their channels", json="print JSON")
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
    sp = add_command(
        sub, "pause", cmd_pause, "refuse new runs (runs in flight go on) until unpause"
    )
    sp.add_argument("--reason", help="said to whoever tries to start a run")
    add_command(sub, "unpause", cmd_pause, "start new runs again")
