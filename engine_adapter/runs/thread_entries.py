"""A run's thread: appending an entry (a message, a note, a decision) to it."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine_adapter.model.errors import NotFound
from engine_adapter.model.identity import Actor
from engine_adapter.model.vocab import AuthorKind, EntryKind
from engine_adapter.store import db


class RunNotFound(NotFound):
    pass


def append(
    conn: psycopg.Connection[Any],
    run_id: str,
    author_kind: AuthorKind,
    author: str,
    kind: EntryKind,
    text: str,
    *,
    step_key: str | None = None,
    dedupe_key: str | None = None,
    data: Any = None,
) -> int | None:
    """Append an entry; returns its seq, or None when dedupe_key was used before."""
    row = db.fetch_one(
        conn,
        "append_entry",
        dict(
            run_id=run_id,
            author_kind=author_kind,
            author=author,
            kind=kind,
            step_key=step_key,
            dedupe_key=dedupe_key,
            text=text,
            data=None if data is None else Jsonb(data),
        ),
    )
    return row["seq"] if row else None


def by_person(
    conn: psycopg.Connection[Any],
    run_id: str,
    actor: Actor,
    kind: EntryKind,
    text: str,
    *,
    step_key: str | None = None,
    data: dict[str, Any] | None = None,
) -> int | None:
    """An entry a person wrote or caused (Human in the thread), in their name: its data says
    who, through which door and on whose behalf (Actor.as_record)."""
    return append(
        conn,
        run_id,
        AuthorKind.HUMAN,
        actor.label,
        kind,
        text,
        step_key=step_key,
        data={**(data or {}), **actor.as_record()},
    )


def system_note(
    conn: psycopg.Connection[Any],
    run_id: str,
    text: str,
    *,
    step_key: str | None = None,
    dedupe_key: str | None = None,
    data: Any = None,
) -> int | None:
    """A note from Threadline itself (System in the thread): what it decided, started, noticed."""
    return append(
        conn,
        run_id,
        AuthorKind.SYSTEM,
        "threadline",
        EntryKind.NOTE,
        text,
        step_key=step_key,
        dedupe_key=dedupe_key,
        data=data,
    )
