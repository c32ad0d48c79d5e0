"""The agent loop's journal: bot entries in the run's thread, keyed by step, turn and call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from engine_adapter.model import names
from engine_adapter.model.vocab import AuthorKind, EntryKind
from engine_adapter.runs import thread_entries
from engine_adapter.store import db


@dataclass(frozen=True)
class ThreadJournal:
    """One step's agent conversation, as entries of its run's thread (agent_loop.Journal)."""

    conn: psycopg.Connection[Any]
    run_id: str
    step_key: str  # the key of the round being worked (entries are written under it)
    bot: str
    attempt: int

    @property
    def journal_key(self) -> str:
        """The step's own key: one journal over all its rounds."""
        return names.journal_key(self.step_key)

    def load(self) -> list[dict[str, Any]]:
        prefix = f"agent:{self.journal_key}:"
        rows = db.fetch_all(self.conn, "agent_journal", dict(run_id=self.run_id, prefix=prefix))
        return [r["data"] for r in rows]

    def run_tokens(self) -> int:
        return int(db.fetch_row(self.conn, "agent_run_tokens", dict(run_id=self.run_id))["used"])

    def human_messages(self, after: int) -> list[dict[str, Any]]:
        return db.fetch_all(
            self.conn,
            "agent_human_messages",
            dict(run_id=self.run_id, step_key=self.journal_key, after=after),
        )

    def append(self, kind: EntryKind, text: str, dedupe_key: str, data: dict[str, Any]) -> bool:
        with self.conn.transaction():
            seq = thread_entries.append(
                self.conn,
                self.run_id,
                AuthorKind.BOT,
                self.bot,
                kind,
                text,
                step_key=self.step_key,
                dedupe_key=dedupe_key,
                data={**data, "attempt": self.attempt},
            )
            db.notify(self.conn, self.run_id, "progress")
        return seq is not None
