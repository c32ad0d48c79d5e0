"""Accounts: who a person or a program is, by id (migration 033).

Every door maps its identity to an account: the console's signed-in user and the OS account
running the CLI to the account of that name, made on their first use (an account an admin
removed stays removed); an API token to the account it was minted for. A gate's `approvers`,
an any_reply gate's `from` and a notify rule's `to` name accounts: a name with no account
matches nobody. An account's channels (an email address, a webhook) are the only places its
resume links go; the account itself or an admin registers them, never a recipe.

Adding and removing accounts, and minting a token for another account, are admin actions
(identity.is_admin: root, or the install's owner on the CLI).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from engine_adapter.access.authorization import Action, change
from engine_adapter.model.errors import Invalid
from engine_adapter.model.identity import ACCOUNT_NAME as NAME
from engine_adapter.model.identity import Actor, os_user
from engine_adapter.model.vocab import Channel, Door, NotifyEvent
from engine_adapter.store import db

CHANNELS = tuple(Channel)


class AccountError(Invalid):
    """An account action refused or impossible as asked; nothing was written."""


def check_name(name: str, what: str = "account name") -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise AccountError(f"{what} {name!r}: 1 to 100 of A-Z a-z 0-9 _ . @ -")
    return name


def live(conn: psycopg.Connection[Any], name: str) -> int | None:
    row = db.fetch_one(conn, "live_account", dict(name=name))
    return None if row is None else int(row["id"])


def was_removed(conn: psycopg.Connection[Any], name: str) -> bool:
    """Whether name's account was removed and not added again."""
    return live(conn, name) is None and bool(
        db.fetch_row(conn, "account_was_removed", dict(name=name))["removed"]
    )


def ensure(conn: psycopg.Connection[Any], name: str, created_by: str) -> int | None:
    """The account of an authenticated name, made on its first use; None for a name that cannot
    be an account or whose account was removed (an admin adds it again)."""
    if not NAME.fullmatch(name):
        return None
    found = live(conn, name)
    if found is not None or was_removed(conn, name):
        return found
    row = db.fetch_one(conn, "insert_account", dict(name=name, created_by=created_by))
    return int(row["id"]) if row else live(conn, name)


def account_of(conn: psycopg.Connection[Any], actor: Actor) -> int | None:
    """The account an actor acts as: a token's own; the console's signed-in user's and this
    CLI's OS account's by name (made on first use); a resume token's subject's (looked up,
    never made); none for the system and webhook callers."""
    if actor.account_id is not None:
        return actor.account_id
    if actor.via == Door.CONSOLE or (actor.via == Door.CLI and actor.name == os_user()):
        return ensure(conn, actor.name, f"first use ({actor.via})")
    if actor.via in (Door.CLI, Door.LINK):  # a subject named by a resume token, whatever its door
        return live(conn, actor.name)
    return None


def resolved(conn: psycopg.Connection[Any], actor: Actor) -> Actor:
    """The actor with its account filled in (unchanged when it has none)."""
    from dataclasses import replace

    found = account_of(conn, actor)
    return actor if found is None or found == actor.account_id else replace(actor, account_id=found)


def ids_named(conn: psycopg.Connection[Any], names: Iterable[str]) -> set[int]:
    rows = db.fetch_all(conn, "live_accounts_named", dict(names=list(names)))
    return {int(r["id"]) for r in rows}


def is_one_of(conn: psycopg.Connection[Any], actor: Actor, names: Iterable[str]) -> bool:
    """Whether the actor, acting for nobody else, is one of the accounts names name."""
    if actor.on_behalf_of is not None:
        return False
    mine = account_of(conn, actor)
    return mine is not None and mine in ids_named(conn, names)


def unknown(conn: psycopg.Connection[Any], names: Iterable[str]) -> list[str]:
    """Those of names that name no live account."""
    wanted = list(dict.fromkeys(names))
    found = {r["name"] for r in db.fetch_all(conn, "live_accounts_named", dict(names=wanted))}
    return [n for n in wanted if n not in found]


def named_in(recipe: dict[str, Any]) -> dict[str, list[str]]:
    """Where a recipe (canonical form) names accounts: path -> names (gates' approvers and
    from, notify rules' to)."""
    from engine_adapter.recipes.recipes import step_docs

    found: dict[str, list[str]] = {}
    for path, step in step_docs(recipe.get("steps") or []):
        if step.get("approvers"):
            found[f"{path}.approvers"] = list(step["approvers"])
        if step.get("from"):
            found[f"{path}.from"] = [step["from"]]
    for i, rule in enumerate(recipe.get("notify") or []):
        if rule.get("to"):
            found[f"notify[{i}].to"] = list(rule["to"])
    return found


def warnings(conn: psycopg.Connection[Any], recipe: dict[str, Any]) -> list[str]:
    """Names in a recipe that name no account (they match nobody until one is added)."""
    out = []
    for path, names in named_in(recipe).items():
        missing = unknown(conn, names)
        if missing:
            out.append(
                f"{path}: no account named {', '.join(missing)}: "
                f"{'it matches' if len(missing) == 1 else 'they match'} nobody until "
                "`threadline user add` adds it"
            )
    return out


def add(
    conn: psycopg.Connection[Any],
    name: str,
    by: Actor,
    channels: Iterable[tuple[str, str]] = (),
) -> int:
    """A new account (admin), with channels registered for it."""
    check_name(name)
    channels = [(c, check_channel(c, t)) for c, t in channels]
    with change(conn, by, Action.MANAGE_ACCOUNTS, detail={"add": name}):
        row = db.fetch_one(conn, "insert_account", dict(name=name, created_by=by.label))
        if row is None:
            raise AccountError(f"account {name} exists (see `threadline user list`)")
        for channel, target in channels:
            _insert_channel(conn, int(row["id"]), channel, target, by)
    return int(row["id"])


def remove(conn: psycopg.Connection[Any], name: str, by: Actor) -> list[str]:
    """Remove an account (admin): its tokens are revoked, its links decide nothing more, and
    approvers lists naming it match nobody. Returns the names of the tokens revoked."""
    with change(conn, by, Action.MANAGE_ACCOUNTS, detail={"remove": name}):
        row = db.fetch_one(conn, "remove_account", dict(name=name, removed_by=by.label))
        if row is None:
            raise AccountError(f"no account named {name!r} (see `threadline user list`)")
        revoked = db.fetch_all(conn, "revoke_account_tokens", dict(account_id=row["id"]))
    return [r["name"] for r in revoked]


def list_accounts(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return db.fetch_all(conn, "list_accounts")


def check_channel(channel: str, target: str) -> str:
    """A channel's target as a notify rule would take it (one home for what a webhook URL or an
    email address may be: notify_spec)."""
    from engine_adapter.recipes.notify_spec import parse_notify

    if channel not in CHANNELS:
        raise AccountError(f"channel {channel!r} must be one of {', '.join(CHANNELS)}")
    errors: list[str] = []
    parse_notify([{"when": [NotifyEvent.GATE], channel: target}], errors)
    if errors:
        raise AccountError("; ".join(e.replace("notify[0].", "--") for e in errors))
    return target


def _may_change_channels(conn: psycopg.Connection[Any], name: str, by: Actor) -> int:
    """The account whose channels by may change: its own (made on first use), or any (admin,
    which the caller's `change` checked)."""
    own = by.name == name and not (by.on_behalf_of or by.minted_by)
    found = ensure(conn, name, f"first use ({by.via})") if own else live(conn, name)
    if found is None:
        raise AccountError(f"no account named {name!r} (see `threadline user list`)")
    return found


def add_channel(
    conn: psycopg.Connection[Any], name: str, channel: str, target: str, by: Actor
) -> bool:
    """Register a channel for an account (its own, or an admin for anyone); False if it was
    registered already."""
    target = check_channel(channel, target)
    with change(conn, by, Action.MANAGE_CHANNELS, account=name, detail={"add": channel}):
        account = _may_change_channels(conn, name, by)
        return _insert_channel(conn, account, channel, target, by)


def remove_channel(
    conn: psycopg.Connection[Any], name: str, channel: str, target: str, by: Actor
) -> None:
    with change(conn, by, Action.MANAGE_CHANNELS, account=name, detail={"remove": channel}):
        account = _may_change_channels(conn, name, by)
        where = dict(account_id=account, channel=channel, target=target)
        if db.fetch_one(conn, "delete_account_channel", where) is None:
            raise AccountError(f"account {name} has no {channel} channel {target!r}")


def _insert_channel(
    conn: psycopg.Connection[Any], account: int, channel: str, target: str, by: Actor
) -> bool:
    row = db.fetch_one(
        conn,
        "insert_account_channel",
        dict(account_id=account, channel=channel, target=target, added_by=by.label),
    )
    return row is not None


def channels_of(conn: psycopg.Connection[Any], names: Iterable[str]) -> list[dict[str, str]]:
    """The registered channels of the named live accounts: name, channel, target."""
    return db.fetch_all(conn, "channels_of_accounts", dict(names=list(names)))


def registered(conn: psycopg.Connection[Any], name: str, channel: str, target: str) -> bool:
    """Whether target is a channel the live account name registered."""
    where = dict(name=name, channel=channel, target=target)
    return bool(db.fetch_row(conn, "channel_registered", where)["registered"])
