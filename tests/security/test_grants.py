"""The grants allowlist (issue 22, "one decision point"): every privilege each process role (and
PUBLIC) holds in schemas threadline and absurd, as a freshly migrated database answers it, is the
one listed in engine_adapter/store/sql/grants.txt, no more and no less."""

from __future__ import annotations

import psycopg
import pytest

from engine_adapter.store import grants

HOW = (
    "engine_adapter/store/sql/grants.txt lists every privilege a process role may hold; a "
    "migration that grants or revokes one changes the list in the same commit"
)


def difference(conn: psycopg.Connection) -> str:
    extra, missing = grants.compare(conn)
    said = []
    if extra:
        said.append("held, but not in the allowlist:\n" + grants.render(extra))
    if missing:
        said.append("in the allowlist, but not held:\n" + grants.render(missing))
    return "\n\n".join(said)


def test_every_role_holds_exactly_the_allowlisted_privileges(conn):
    said = difference(conn)
    assert not said, f"{HOW}.\n\n{said}"


def test_no_role_executes_a_routine_by_public_grant(conn):
    """PUBLIC executes nothing of Threadline's or Absurd's: a routine added without grants is
    executed by no process until one is granted it."""
    assert not {g for g in grants.held(conn, [grants.PUBLIC])}


@pytest.mark.parametrize(
    "grant, shows",
    [
        (
            "grant insert on threadline.run_threads to threadline_hooks",
            "table    threadline.run_threads  INSERT",
        ),
        (
            "grant update (used_at) on threadline.resume_tokens to threadline_hooks",
            "column   threadline.resume_tokens(used_at)  UPDATE",
        ),
        (
            "grant execute on function threadline.queue_run (uuid, text) to threadline_viewer",
            "routine  threadline.queue_run(uuid, text)  EXECUTE",
        ),
        (
            "grant threadline_console to threadline_viewer",
            "routine  threadline.store_workflow_version(jsonb)  EXECUTE",
        ),
        (
            "grant usage on sequence threadline.run_queue_seq to threadline_hooks",
            "sequence threadline.run_queue_seq  USAGE",
        ),
        ("grant create on schema threadline to threadline_bots", "schema   threadline  CREATE"),
    ],
)
def test_a_privilege_granted_by_hand_is_caught(conn, grant, shows):
    """Whatever grants it (a migration, a hand, a role made member of another), the check sees
    it, and says what the allowlist would need."""
    try:
        conn.execute(grant)
        said = difference(conn)
        assert said.startswith("held, but not in the allowlist:") and shows in said, said
    finally:
        conn.execute(grant.replace("grant", "revoke", 1).replace(" to ", " from "))


def test_a_privilege_taken_away_is_caught(conn):
    conn.execute("revoke select on threadline.workflows from threadline_hooks")
    said = difference(conn)
    assert said.startswith("in the allowlist, but not held:")
    assert "[threadline_hooks]\ntable    threadline.workflows  SELECT" in said


def test_the_allowlist_refuses_what_it_cannot_read():
    assert grants.parse("[threadline_hooks]\ntable  threadline.pause  SELECT,UPDATE\n") == {
        grants.Grant("threadline_hooks", "table", "threadline.pause", "SELECT"),
        grants.Grant("threadline_hooks", "table", "threadline.pause", "UPDATE"),
    }
    for text, says in (
        ("table threadline.pause SELECT", r"under a \[role\] line"),
        ("[threadline_root]", "is not one of"),
        ("[threadline_hooks]\nview threadline.pause SELECT", "kinds: schema"),
    ):
        with pytest.raises(ValueError, match=says):
            grants.parse(text)
