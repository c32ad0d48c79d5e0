"""Who is acting. Every reply, decision and command carries an `Actor`: an identity that a door
authenticated (the OS account running the CLI, the console's signed-in user, a link's or an API
token's subject), never a name someone typed. Each maps to an account (accounts.py): a gate's
`approvers` name accounts, not names.

An operator may record an action for someone else (`threadline approve RUN --as alice`): the
actor stays the operator, `on_behalf_of` says for whom, and such an action never satisfies a
gate's `approvers` or `from` list. An API token minted by an admin for another account acts as
that account, visibly: "alice, via a token minted by root".
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass, field
from typing import Any

from engine_adapter.model.errors import Invalid
from engine_adapter.model.settings import credentials_path
from engine_adapter.model.vocab import Door

DOORS = tuple(Door)
# What a person may do where a door assigns roles (the console's users file): a viewer reads;
# an operator replies, spawns, cancels, retries and edits recipes; an approver decides gates.
ROLES = ("viewer", "operator", "approver")
# An account's name (accounts.py): what approvers, from and a notify rule's `to` may name.
ACCOUNT_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,100}")


@dataclass(frozen=True)
class Actor:
    name: str  # the authenticated identity: an account's name
    via: str  # the door it came through: one of DOORS
    on_behalf_of: str | None = None  # a name the actor typed: recorded, never trusted
    roles: frozenset[str] | None = None  # None: the door grants everything (the CLI's account)
    account_id: int | None = None  # the account, where the door proved it (an API token's)
    minted_by: str | None = None  # a token minted by another account: who minted it
    admin: bool = False  # manages accounts and mints tokens for others (see is_admin)
    # What the door was shown (a console session id, an API token): the database checks it
    # again for each change the console's login makes (migration 045). Never shown or compared.
    credential: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = set(self.roles or ()) - set(ROLES)
        if unknown:
            raise Invalid(f"unknown roles {sorted(unknown)}; roles are {', '.join(ROLES)}")
        if self.via not in DOORS:
            raise Invalid(f"via {self.via!r} must be one of {', '.join(DOORS)}")
        if not self.name.strip():
            raise Invalid("an actor needs a name")
        if self.on_behalf_of is not None and not self.on_behalf_of.strip():
            raise Invalid("--as: the name is empty")

    @property
    def label(self) -> str:
        """How the thread shows it: "alice", "root for alice", or "alice, via a token minted by
        root"."""
        shown = f"{self.name} for {self.on_behalf_of}" if self.on_behalf_of else self.name
        return f"{shown}, via a token minted by {self.minted_by}" if self.minted_by else shown

    def as_record(self) -> dict[str, str | None]:
        record = {"actor": self.name, "via": self.via, "on_behalf_of": self.on_behalf_of}
        return record | ({"minted_by": self.minted_by} if self.minted_by else {})

    def as_caller(self) -> dict[str, Any]:
        """A run's trigger fields for a run this actor starts (its initiator)."""
        return (
            {"caller": self.name}
            | ({"on_behalf_of": self.on_behalf_of} if self.on_behalf_of else {})
            | ({"minted_by": self.minted_by} if self.minted_by else {})
        )


SYSTEM = Actor("threadline", Door.SYSTEM)
_LABELLED = re.compile(r" for |, via a token minted by ")


def name_of_label(label: str) -> str:
    """Who a label (Actor.label, as some triggers record their caller) names as the actor:
    "root for alice" -> "root". Exact for account names, which hold no space or comma."""
    return _LABELLED.split(label, maxsplit=1)[0]


def os_user() -> str:
    """The account this process runs as, from the kernel's uid: $USER and $LOGNAME can be set to
    anything, the uid cannot."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # an account with no passwd entry (containers): the uid is still who it is
        return f"uid{uid}"


def is_admin() -> bool:
    """Whether this process's OS account administers the install: root, or the account that
    owns its credentials (the one that ran `threadline up` or `db migrate`). Anyone else given a
    database URL acts as themselves only."""
    uid = os.getuid()
    if uid == 0:
        return True
    try:
        return credentials_path().stat().st_uid == uid
    except OSError:
        return False


def cli_actor(on_behalf_of: str | None = None) -> Actor:
    return Actor(os_user(), Door.CLI, on_behalf_of, admin=is_admin())
