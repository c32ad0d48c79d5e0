"""Least-privilege database roles: every process kind connects as its own role, and each role is
shown unable to do what it must not (the owner, the superuser, alone migrates)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from console import users
from engine_adapter.model import names
from engine_adapter.model.identity import Actor
from engine_adapter.model.settings import QUEUE
from engine_adapter.runs import gates, run_state, thread_entries
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db, host_listener, roles
from engine_adapter.testing import harness

GATED = """
slug: gated
steps:
  - id: work
    run_command: sleep 30
  - id: ask
    human_gate: "Go?"
"""
ASK = """
slug: ask
steps:
  - id: ask
    human_gate: "Go?"
"""


def as_role(logins: dict[str, str], kind: str) -> psycopg.Connection:
    return db.connect(logins[kind])


def refused(conn: psycopg.Connection, statement: str, params: object = None) -> str:
    """The statement fails for lack of privilege; returns the message. Nothing is written."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as info, conn.transaction():
        conn.execute(statement, params)
    return str(info.value)


@pytest.fixture
def awaiting_bot(conn, apply, procs) -> str:
    """A run whose first step waits for a bot (no bot process runs)."""
    apply(GATED)
    procs.start("conductor")
    run_id = spawn(conn, "gated").run_id
    harness.wait_for(
        lambda: db.fetch_one(conn, "get_run", dict(run_id=run_id))["awaiting"],
        what="the instruction",
    )
    return run_id


def test_every_process_connects_as_its_own_role(conn, apply, procs, logins):
    procs.start("conductor", wait=True)
    procs.start("bots", wait=True)
    login = {k: psycopg.conninfo.conninfo_to_dict(u)["user"] for k, u in logins.items()}
    wanted = {login["conductor"], login["bots"]}

    def sessions() -> set[tuple[str, str]]:
        return {
            (r["usename"], r["application_name"])
            for r in conn.execute(
                "select usename, application_name from pg_stat_activity"
                " where datname = current_database()"
                " and backend_type = 'client backend' and pid <> pg_backend_pid()"
            )
        }

    def users() -> set[str]:
        return {user for user, _ in sessions()}

    # A connection the test harness just closed lingers for a moment while its backend exits;
    # the processes' own connections are long-lived, so a wrong one would never leave the set.
    try:
        harness.wait_for(lambda: users() == wanted, timeout=5, what="only the processes' logins")
    except TimeoutError:
        assert users() == wanted
    assert all(name.endswith(f".{kind}") for kind, name in login.items())
    # Each process names itself to Postgres (pg_stat_activity, the server's log); the host's
    # shared listening connection, held by one of them, says what it is.
    listener = {(user, host_listener.APP_NAME) for user in wanted}
    assert sessions() - listener == {
        (login["conductor"], "threadline conductor"),
        (login["bots"], "threadline bots"),
    }
    for kind in roles.ROLES:
        with as_role(logins, kind) as c:
            assert not roles.is_superuser(c)
            assert c.execute("select threadline.caller_kind() as k").fetchone()["k"] == kind


@pytest.mark.parametrize("kind", list(roles.ROLES))
def test_no_role_runs_programs_or_makes_roles(logins, kind):
    with as_role(logins, kind) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege), c.transaction():
            c.execute("create temp table t (x text); copy t from program 'id'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege), c.transaction():
            c.execute("create role intruder superuser")
        with pytest.raises(psycopg.errors.InsufficientPrivilege), c.transaction():
            c.execute("create table threadline.intruder (x int)")


def test_the_viewer_reads_and_writes_nothing(conn, apply, logins):
    apply(ASK)
    run_id = spawn(conn, "ask").run_id
    with as_role(logins, "viewer") as v:
        assert v.execute("select count(*) as n from threadline.run_threads").fetchone()["n"] == 1
        refused(v, "update threadline.run_threads set state = 'completed'")
        refused(
            v,
            "insert into threadline.decisions (step_key, run_id, decision, actor) "
            "values ('k', %s, 'approve', 'v')",
            (run_id,),
        )
        refused(v, "delete from threadline.workflows")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            thread_entries.append(v, run_id, "human", "someone", "message", "hello")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            spawn(v, "ask")


def test_bots_cannot_release_a_gate_or_speak_for_people(conn, apply, procs, logins):
    apply(ASK)
    procs.start("conductor")
    run_id = spawn(conn, "ask").run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    key = names.step_key(run_id, "ask", 1)
    decision = {"decision": "approve", "actor": "alice", "text": "", "at": "2026-01-01T00:00:00Z"}
    with as_role(logins, "bots") as b:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # bots release only by report
            run_state.emit_step_done(b, run_id, key, decision)
        refused(
            b,
            "select absurd.emit_event(%s, %s, %s)",
            (QUEUE, names.done_event(key), Jsonb(decision)),
        )
        refused(
            b,
            "insert into threadline.decisions (step_key, run_id, decision, actor) "
            "values (%s, %s, 'approve', 'alice')",
            (key, run_id),
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="writing a human entry"):
            thread_entries.append(b, run_id, "human", "alice", "message", "👍")
        refused(
            b,
            "insert into threadline.thread_entries (run_id, seq, author_kind, author, kind, text) "
            "values (%s, 99, 'human', 'alice', 'message', 'x')",
            (run_id,),
        )
        refused(
            b, "update threadline.run_threads set state = 'completed' where run_id = %s", (run_id,)
        )
        refused(b, "select * from absurd.t_threadline")
    assert conn.execute("select count(*) as n from threadline.decisions").fetchone()["n"] == 0
    assert harness.wait_for_state(procs.url, run_id, "waiting")


def test_a_bot_releases_no_step_by_itself(conn, logins, awaiting_bot):
    """Since migration 043 a bot releases a step only through the report of the attempt that
    claimed it (with that attempt's secret, tests/security/test_process_logins.py): not even the
    bot step a run awaits may be released by emitting its done event directly."""
    run_id = awaiting_bot
    with as_role(logins, "bots") as b:
        for step in ("ask", "work"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                run_state.emit_step_done(
                    b, run_id, names.step_key(run_id, step, 1), {"status": "completed"}
                )
    row = db.fetch_one(conn, "get_run", dict(run_id=run_id))
    assert row["awaiting"] and row["last_emitted_key"] != names.step_key(run_id, "work", 1)


def test_people_doors_cannot_fake_a_step_result_or_emit_threadline_events(
    conn, logins, awaiting_bot
):
    run_id = awaiting_bot
    key = names.step_key(run_id, "work", 1)
    with as_role(logins, "console") as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="releasing step"):
            run_state.emit_step_done(c, run_id, key, {"status": "completed", "output": "forged"})
        refused(c, "select absurd.emit_event(%s, %s, '{}'::jsonb)", (QUEUE, names.done_event(key)))
        refused(
            c,
            "select threadline.emit_debug_event(%s, %s, '{}'::jsonb)",
            (QUEUE, " THREADLINE.step.done:" + key),
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="credential"):
            with c.transaction():  # a retry only for a person allowed it (migration 045)
                c.execute(
                    "select threadline.emit_retry(%s, %s, %s, '{}'::jsonb)", (QUEUE, run_id, key)
                )
        c.execute("select threadline.emit_debug_event(%s, 'custom.nudge', '{}'::jsonb)", (QUEUE,))
    assert db.fetch_one(conn, "get_run", dict(run_id=run_id))["awaiting"]


def test_the_console_decides_gates_through_the_checked_path(conn, apply, procs, logins):
    apply(ASK)
    procs.start("conductor")
    run_id = spawn(conn, "ask").run_id
    harness.wait_for_state(procs.url, run_id, "waiting")
    with as_role(logins, "console") as c:
        # The person's session is the credential the database checks (migration 045), opened
        # for the password the database checks (migration 049).
        users.add_user(conn, "alice", "alice's password", ["approver"])
        session = "alice-session-" + "x" * 32
        proof = dict(via="password", account="alice", secret="alice's password", days=1)
        c.execute(db.q("open_console_session"), dict(session=session, **proof))
        alice = Actor("alice", "console", roles=frozenset({"approver"}), credential=session)
        gates.decide(c, run_id, "approve", alice, "fine")
    harness.wait_for_state(procs.url, run_id, "completed")


def test_the_ingress_spawns_and_does_nothing_else(conn, apply, procs, logins):
    apply(ASK + "webhooks:\n  - path: x\n")
    procs.start("conductor")
    with as_role(logins, "hooks") as h:
        run_id = spawn(
            h,
            "ask",
            trigger={"kind": "webhook", "path": "x", "delivery": "d1"},
            idempotency_key="webhook:x:d1",
        ).run_id
        harness.wait_for_state(procs.url, run_id, "waiting")
        key = names.step_key(run_id, "ask", 1)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            gates.decide(h, run_id, "approve", Actor("alice", "console"))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            run_state.emit_step_done(h, run_id, key, {"decision": "approve"})
        refused(h, "update threadline.run_threads set state = 'cancelled'")
        refused(h, "update threadline.workflows set enabled = false")
        refused(h, "select absurd.cancel_task(%s, %s)", (QUEUE, run_id))
    assert harness.wait_for_state(procs.url, run_id, "waiting")
