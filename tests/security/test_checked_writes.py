"""The conductor's and the console's logins, used as an attacker holding one would (issue 22,
migration 047): neither writes a run's state, a workflow, a version, a webhook trigger or a
proposal by hand, and the checked functions that do refuse what their callers may not do. Each
refused attempt changes nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db
from tests.integration.test_api import token
from tests.security.test_db_logins import refused
from tests.security.test_process_logins import writes_held

HOOKED = """
slug: hooked
allow_proposals: true
webhooks:
  - path: hooked
steps:
  - id: work
    run_command: echo work
"""

# Each a write some earlier migration left a process login; none is held any more.
BY_HAND = (
    "update threadline.run_threads set state = 'completed', finished_at = now()",
    "update threadline.run_threads set outputs = '{\"forged\": true}'",
    "insert into threadline.workflow_versions (slug, version, hash, recipe, source)"
    " select slug, version + 1, 'forged', recipe, 'update' from threadline.workflows",
    'update threadline.workflows set recipe = recipe || \'{"env": ["SECRET"]}\'',
    "insert into threadline.workflows (slug, name, recipe, version, hash)"
    " values ('forged', 'forged', '{}', 1, 'x')",
    "delete from threadline.webhook_triggers",
    "insert into threadline.proposals (workflow, base_hash, proposed, proposed_hash, summary, diff,"
    " risk, proposed_by, proposed_via) select slug, hash, recipe, 'x', 'x', '', 'low', 'alice',"
    " 'console' from threadline.workflows",
    "update threadline.proposals set status = 'approved', reviewed_by = 'alice'",
    "select nextval('threadline.proposals_id_seq')",
    "select slug from threadline.workflows for update",
)


def snapshot(conn: psycopg.Connection) -> dict[str, Any]:
    """What an attack here could have changed."""
    return {
        table: conn.execute(f"select * from threadline.{table} order by 1, 2").fetchall()
        for table in (
            "run_threads",
            "workflows",
            "workflow_versions",
            "webhook_triggers",
            "proposals",
        )
    }


@pytest.fixture
def world(conn, apply) -> dict[str, Any]:
    """A workflow with a webhook that takes proposals, an open proposal by alice, and three
    runs of it: one pending, one completed, one failed (its task not retried)."""
    apply(HOOKED)
    runs = [str(spawn(conn, "hooked").run_id) for _ in range(3)]
    conn.execute(
        "update threadline.run_threads set state = 'completed' where run_id = %s", (runs[1],)
    )
    conn.execute("update threadline.run_threads set state = 'failed' where run_id = %s", (runs[2],))
    workflow = conn.execute("select * from threadline.workflows where slug = 'hooked'").fetchone()
    proposal = conn.execute(
        "insert into threadline.proposals (workflow, base_hash, proposed, proposed_hash, summary,"
        " diff, risk, proposed_by, proposed_via) values ('hooked', %s, %s, 'other', 'x', '',"
        " 'low', 'alice', 'console') returning id",
        (workflow["hash"], Jsonb(workflow["recipe"])),
    ).fetchone()["id"]
    return dict(
        pending=runs[0], completed=runs[1], failed=runs[2], workflow=workflow, proposal=proposal
    )


def version_row(world: dict[str, Any], **changes: Any) -> Jsonb:
    """store_workflow_version's argument: the current recipe with a forged env, as asked."""
    w = world["workflow"]
    row = dict(
        slug=w["slug"],
        name=w["name"],
        description=None,
        bot=None,
        recipe=w["recipe"] | {"env": ["SECRET"]},
        schedule=None,
        timezone=None,
        hash="forged",
        source="update",
        rolled_back_from=None,
        source_text=None,
    )
    return Jsonb(row | changes)


def proposal_row(world: dict[str, Any], **changes: Any) -> Jsonb:
    w = world["workflow"]
    row = dict(
        workflow="hooked",
        base_hash=w["hash"],
        proposed=w["recipe"],
        proposed_hash="new",
        summary="x",
        diff="",
        risk="low",
        risk_reasons=[],
        proposed_by="alice",
        proposed_via="console",
        run_id=None,
        proposed_text=None,
    )
    return Jsonb(row | changes)


def as_person(c: psycopg.Connection, credential: str, action: str) -> None:
    """Present a credential for an action, in the open transaction."""
    db.fetch_row(c, "authenticate", dict(credential=credential, action=action, account=None))


def state(run_id: str, to: str) -> tuple[str, tuple[Any, ...]]:
    return ("select threadline.set_run_state(%s, %s, null, null, null, null, null)", (run_id, to))


@pytest.mark.parametrize("role", ["threadline_conductor", "threadline_console"])
def test_neither_login_holds_a_table_or_sequence_write(conn, role):
    assert writes_held(conn, role) == set()


@pytest.mark.parametrize("kind", ["conductor", "console"])
def test_no_run_state_workflow_version_trigger_or_proposal_is_written_by_hand(
    conn, logins, world, kind
):
    before = snapshot(conn)
    with db.connect(logins[kind]) as c:
        for statement in BY_HAND:
            assert "permission denied" in refused(c, statement), statement
    assert snapshot(conn) == before


def test_the_console_login_calls_each_checked_function_only_with_a_credential(
    conn, db_url, logins, world
):
    vic = token(db_url, "vic", "viewer")
    before = snapshot(conn)
    attempts = [
        state(world["pending"], "cancelled"),
        state(world["failed"], "running"),
        ("select threadline.retake_run_agent(%s)", (world["failed"],)),
        ("select threadline.lock_workflow('hooked')", None),
        ("select threadline.store_workflow_version(%s)", (version_row(world),)),
        ("select threadline.set_workflow_enabled('hooked', false)", None),
        ("select threadline.insert_proposal(%s)", (proposal_row(world),)),
        ("select threadline.lock_proposal(%s)", (world["proposal"],)),
        (
            "select threadline.review_proposal(%s, 'approved', 'vic', null)",
            (world["proposal"],),
        ),
        ("select threadline.set_proposal_status(%s, 'expired')", (world["proposal"],)),
        ("select threadline.proposal_applied(%s, 2)", (world["proposal"],)),
    ]
    with db.connect(logins["console"]) as c:
        for statement, params in attempts:
            assert "needs a signed-in person's credential" in refused(c, statement, params)
            # A viewer's credential is refused, and leaves no person to act for.
            with c.transaction():
                for action in ("cancel", "retry", "apply_recipe", "propose", "review_proposal"):
                    assert "needs the" in refused(
                        c, db.q("authenticate"), dict(credential=vic, action=action, account=None)
                    )
                assert "credential" in refused(c, statement, params), statement
    assert snapshot(conn) == before


def test_a_person_moves_a_run_only_as_cancel_or_retry_say(conn, db_url, logins, world):
    olga = token(db_url, "olga", "operator")
    before = snapshot(conn)
    with db.connect(logins["console"]) as c, c.transaction():
        as_person(c, olga, "cancel")
        as_person(c, olga, "retry")
        for run, to in (
            (world["pending"], "completed"),  # finished by hand
            (world["completed"], "cancelled"),  # a completed run stays so
            (world["pending"], "running"),  # a retry moves only a failed run
        ):
            assert "not allowed" in refused(c, *state(run, to)), (run, to)
    assert snapshot(conn) == before


def test_a_person_forges_no_version_proposal_or_review(conn, db_url, logins, world):
    olga = token(db_url, "olga", "operator")
    alice = token(db_url, "alice", "operator", "approver")
    before = snapshot(conn)
    with db.connect(logins["console"]) as c, c.transaction():
        as_person(c, olga, "apply_recipe")
        as_person(c, olga, "rollback")
        as_person(c, olga, "apply_proposal")
        as_person(c, olga, "propose")
        # A protected change passed off as an approved proposal's, a rollback to no such version.
        for row, says in (
            (version_row(world, source="proposal"), "no one approved"),
            (version_row(world, source="rollback", rolled_back_from=7), "a version it has not"),
        ):
            assert says in refused(c, "select threadline.store_workflow_version(%s)", (row,))
        assert "in the name of alice" in refused(
            c, "select threadline.insert_proposal(%s)", (proposal_row(world),)
        )
        # Marked stale or applied when it is not.
        assert "not allowed" in refused(
            c, "select threadline.set_proposal_status(%s, 'stale')", (world["proposal"],)
        )
        assert "not allowed" in refused(
            c, "select threadline.proposal_applied(%s, 1)", (world["proposal"],)
        )
    with db.connect(logins["console"]) as c, c.transaction():
        as_person(c, alice, "review_proposal")
        label = "alice, via a token minted by root"
        assert "someone other than its authors" in refused(
            c,
            "select threadline.review_proposal(%s, 'approved', %s, null)",
            (world["proposal"], label),
        )
    assert snapshot(conn) == before


def test_the_conductor_moves_no_finished_run_and_proposes_only_for_its_runs_agent(
    conn, logins, world
):
    before = snapshot(conn)
    with db.connect(logins["conductor"]) as c:
        assert "it completed" in refused(c, *state(world["completed"], "running"))
        assert "no retry of it runs" in refused(c, *state(world["failed"], "running"))
        run = conn.execute(
            "select bot, recipe_hash from threadline.run_threads where run_id = %s",
            (world["pending"],),
        ).fetchone()
        agent = dict(proposed_by=f"{run['bot']} (agent)", proposed_via="system")
        for row in (
            proposal_row(world),  # no run
            proposal_row(world, run_id=world["completed"], **agent),  # a finished run
            proposal_row(world, run_id=world["pending"]),  # in a person's name
        ):
            assert "running run's agent" in refused(
                c, "select threadline.insert_proposal(%s)", (row,)
            )
        for statement, params in (
            ("select threadline.store_workflow_version(%s)", (version_row(world),)),
            ("select threadline.lock_workflow('hooked')", None),
            ("select threadline.review_proposal(%s, 'approved', 'x', null)", (world["proposal"],)),
            ("select threadline.retake_run_agent(%s)", (world["failed"],)),
        ):
            assert "permission denied" in refused(c, statement, params), statement
    assert snapshot(conn) == before
