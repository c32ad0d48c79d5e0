"""Where a table's CHECK constraint lists a vocabulary, the migrated database and the enum of
engine_adapter/model/vocab.py hold the same words; and psycopg sends a member as its value."""

from __future__ import annotations

import re
from enum import StrEnum

import psycopg
import pytest
from psycopg.types.json import Jsonb

from engine_adapter.model.vocab import (
    AttemptOutcome,
    AuthorKind,
    AwaitKind,
    Channel,
    Door,
    EntryKind,
    GateDecision,
    NotificationStatus,
    NotifyEvent,
    ProposalStatus,
    RunState,
)

# constraint name -> (its enum, members the database never stores)
CHECKED: dict[str, tuple[type[StrEnum], set[str]]] = {
    "run_threads_state_check": (RunState, set()),
    "run_threads_await_kind_check": (AwaitKind, set()),
    "step_claims_outcome_check": (AttemptOutcome, {AttemptOutcome.RUNNING, AttemptOutcome.PAUSED}),
    "decisions_decision_check": (GateDecision, set()),
    "thread_entries_author_kind_check": (AuthorKind, set()),
    "thread_entries_kind_check": (EntryKind, set()),
    "notifications_event_check": (NotifyEvent, set()),
    "notifications_status_check": (NotificationStatus, set()),
    "notifications_channel_check": (Channel, set()),
    "account_channels_channel_check": (Channel, set()),
    "decisions_via_check": (Door, set()),
    "proposals_status_check": (ProposalStatus, set()),
}


def check_words(conn: psycopg.Connection, name: str) -> set[str]:
    """The quoted words of the CHECK constraint `name`, as the database holds it now."""
    row = conn.execute(
        "select pg_get_constraintdef(c.oid) from pg_constraint c"
        " join pg_namespace n on n.oid = c.connamespace"
        " where n.nspname = 'threadline' and c.contype = 'c' and c.conname = %s",
        (name,),
    ).fetchone()
    assert row is not None, f"no CHECK constraint {name} in the migrated database"
    return set(re.findall(r"'([^']*)'::text", row[0]))


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_the_check_constraint_lists_the_enums_words(template_url: str, name: str) -> None:
    enum, unstored = CHECKED[name]
    with psycopg.connect(template_url) as conn:
        assert check_words(conn, name) == {str(m) for m in enum} - unstored


def test_psycopg_sends_a_member_as_its_value(template_url: str) -> None:
    with psycopg.connect(template_url) as conn:
        row = conn.execute(
            "select %s::text, %s = 'completed', %s::jsonb",
            (RunState.FAILED, RunState.COMPLETED, Jsonb([RunState.QUEUED])),
        ).fetchone()
    assert row == ("failed", True, ["queued"])
