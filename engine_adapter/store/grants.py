"""The database privileges of Threadline's process roles, against their allowlist.

sql/grants.txt lists, per role (and PUBLIC), every privilege it may hold in schemas threadline and
absurd: schema, table, column, sequence and routine privileges, one object a line:

    [threadline_hooks]
    table    threadline.workflows              SELECT
    routine  threadline.spawn_run(text, ...)   EXECUTE

`held` asks the server what each role can do (membership included), so a grant made anywhere, by
a migration or by hand, shows up; `compare` says what is held beyond the list and what it lists
that is gone. An extension's own routines (pg_trgm's) are left as the extension made them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

from engine_adapter.store import db
from engine_adapter.store.roles import ROLES

ALLOWLIST = "sql/grants.txt"
PUBLIC = "public"
CHECKED_ROLES = (*ROLES.values(), PUBLIC)
KINDS = ("schema", "table", "column", "sequence", "routine")


@dataclass(frozen=True, order=True)
class Grant:
    role: str
    kind: str  # one of KINDS
    object: str  # schema.name, schema.table(column), schema.routine(argument types)
    privilege: str  # SELECT, UPDATE, USAGE, EXECUTE, ...


def parse(text: str) -> set[Grant]:
    """The grants an allowlist text names; ValueError naming the line of anything else."""
    found: set[Grant] = set()
    role = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            role = line[1:-1].strip()
            if role not in CHECKED_ROLES:
                raise ValueError(f"line {number}: role {role!r} is not one of {CHECKED_ROLES}")
            continue
        kind, _, rest = line.partition(" ")
        obj, _, privileges = rest.strip().rpartition(" ")
        if role is None or kind not in KINDS or not obj.strip() or not privileges:
            raise ValueError(
                f"line {number}: {raw.strip()!r} must be `<kind> <object> <PRIV>[,PRIV...]` "
                f"under a [role] line (kinds: {', '.join(KINDS)})"
            )
        for privilege in privileges.split(","):
            found.add(Grant(role, kind, obj.strip(), privilege.strip().upper()))
    return found


def allowed() -> set[Grant]:
    """The checked-in allowlist."""
    return parse(resources.files("engine_adapter.store").joinpath(ALLOWLIST).read_text())


def held(conn: psycopg.Connection[Any], roles: Iterable[str] = CHECKED_ROLES) -> set[Grant]:
    """What each role can do now in schemas threadline and absurd, as the server says."""
    rows = conn.execute(db.q("role_privileges"), dict(roles=list(roles))).fetchall()
    return {Grant(r["role"], r["kind"], r["object"], r["privilege"]) for r in rows}


def compare(conn: psycopg.Connection[Any]) -> tuple[set[Grant], set[Grant]]:
    """(held but not allowed, allowed but not held)."""
    have, allow = held(conn), allowed()
    return have - allow, allow - have


def render(grants: Iterable[Grant]) -> str:
    """Grants in the allowlist's own format, by role: what to add to it or take out."""
    by_role: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for g in sorted(grants):
        by_role[g.role][(g.kind, g.object)].append(g.privilege)
    lines = []
    for role in sorted(by_role, key=lambda r: (r == PUBLIC, r)):
        lines.append(f"[{role}]")
        for (kind, obj), privileges in sorted(
            by_role[role].items(), key=lambda item: (KINDS.index(item[0][0]), item[0][1])
        ):
            lines.append(f"{kind:<9}{obj}  {','.join(sorted(privileges))}")
    return "\n".join(lines)
