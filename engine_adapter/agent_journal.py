"""The agent loop's journal: bot entries in the run's thread, keyed by step, turn and call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from . import db, thread_entries


@dataclass(frozen=True)
class ThreadJournal:
    """One step's agent conversation, as entries of its run's thread (agent_loop.Journal)."""

    conn: psycopg.Connection[Any]
    run_id: str
    step_key: str
    bot: str
    attempt: int

    def load(self) -> list[dict[str, Any]]:
        rows = db.fetch_all(
            self.conn, "agent_journal", dict(run_id=self.run_id, step_key=self.step_key)
        )
        return [r["data"] for r in rows]

    def run_tokens(self) -> int:
        return int(db.fetch_one(self.conn, "agent_run_tokens", dict(run_id=self.run_id))["used"])

    def human_messages(self, after: int) -> list[dict[str, Any]]:
        return db.fetch_all(
            self.conn,
            "agent_human_messages",
            dict(run_id=self.run_id, step_key=self.step_key, after=after),
        )

    def append(self, kind: str, text: str, dedupe_key: str, data: dict[str, Any]) -> bool:
        with self.conn.transaction():
            seq = thread_entries.append(
                self.conn,
                self.run_id,
                "bot",
                self.bot,
                kind,
                text,
                step_key=self.step_key,
                dedupe_key=dedupe_key,
                data={**data, "attempt": self.attempt},
            )
            db.notify(self.conn, self.run_id, "progress")
        return seq is not None
