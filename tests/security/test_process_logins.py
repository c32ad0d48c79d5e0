"""The bots' and the conductor's own database logins, used as an attacker holding one would
(issue 22, "process logins hold no table writes at all"): neither holds a table or sequence
write; each write goes through a security-definer function that checks its arguments, and each
attempt past those checks is refused by the database and changes nothing.

- bots (migration 043): an attempt is ended, renewed or reported only with the secret its claim
  handed out; a terminal entry only through that report; a process beats and stops only for
  itself, registers only as a bot, and starts no run.
- conductor (migration 044): Absurd's tables are written only by Absurd's own functions, which
  the conductor executes (they run as their owner); it writes no process row by hand. The console
  keeps none of those functions that would let it write what it could not before (a checkpoint,
  an event).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from engine_adapter.model.settings import QUEUE
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db, grants
from engine_adapter.testing import harness

WORK = """
slug: work
steps:
  - id: work
    run_command: echo work
"""


def refused(conn: psycopg.Connection, statement: str, params: Any = None) -> str:
    """The statement is refused for lack of privilege (its transaction rolled back)."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as info, conn.transaction():
        conn.execute(statement, params)
    return str(info.value)


def writes_held(conn: psycopg.Connection, role: str) -> set[str]:
    """Every table, column or sequence privilege but SELECT the role holds, by the allowlist's
    reading of the catalog and by has_*_privilege over every relation of both schemas."""
    held = {
        f"{g.kind} {g.object} {g.privilege}"
        for g in grants.held(conn, [role])
        if g.kind in ("table", "column", "sequence") and g.privilege != "SELECT"
    }
    for row in conn.execute(
        "select c.oid, format('%I.%I', n.nspname, c.relname) as name, c.relkind"
        "  from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname in ('threadline', 'absurd') and c.relkind in ('r', 'p', 'S', 'v')"
    ):
        if row["relkind"] == "S":
            for privilege in ("USAGE", "UPDATE"):
                if conn.execute(
                    "select has_sequence_privilege(%s, %s, %s) as ok",
                    (role, row["oid"], privilege),
                ).fetchone()["ok"]:
                    held.add(f"sequence {row['name']} {privilege}")
            continue
        for privilege in ("INSERT", "UPDATE", "DELETE", "TRUNCATE"):
            column = privilege in ("INSERT", "UPDATE")  # the privileges a column may hold
            if conn.execute(
                "select has_table_privilege(%s, %s, %s)"
                "    or (%s and has_any_column_privilege(%s, %s, %s)) as ok",
                (role, row["oid"], privilege, column, role, row["oid"], privilege),
            ).fetchone()["ok"]:
                held.add(f"table {row['name']} {privilege}")
    return held


def state_of(conn: psycopg.Connection) -> dict[str, Any]:
    """What an attack could have changed: every claim, worker and run, and the thread."""
    return {
        "claims": conn.execute(
            "select step_key, attempt, outcome, finished_at, lease_until, pgid"
            "  from threadline.step_claims order by 1, 2"
        ).fetchall(),
        "workers": conn.execute(
            "select id, kind, last_beat_at, stopped_at from threadline.workers order by 1"
        ).fetchall(),
        "runs": conn.execute(
            "select run_id, state, awaiting, await_key from threadline.run_threads order by 1"
        ).fetchall(),
        "entries": conn.execute("select count(*) as n from threadline.thread_entries").fetchone(),
        # Events emitted (a waiting run's own row, payload null, says only that it waits).
        "events": conn.execute(
            "select event_name from absurd.e_threadline where payload is not null order by 1"
        ).fetchall(),
    }


@pytest.fixture
def open_step(conn, apply, procs) -> Iterator[tuple[str, str]]:
    """A run whose step awaits a bot (a conductor runs it, no bot process does): (run, step)."""
    apply(WORK)
    procs.start("conductor")
    run_id = str(spawn(conn, "work").run_id)
    row = harness.wait_for(
        lambda: conn.execute(
            "select await_key from threadline.run_threads"
            " where run_id = %s and awaiting and await_kind = 'bot'",
            (run_id,),
        ).fetchone(),
        what="the step's instruction",
    )
    harness.wait_for(  # and the conductor sleeps on it: nothing of its own moves meanwhile
        lambda: conn.execute(
            "select 1 from absurd.w_threadline where event_name = %s",
            ("threadline.step.done:" + row["await_key"],),
        ).fetchone(),
        what="the conductor's wait",
    )
    yield run_id, row["await_key"]


def register(conn: psycopg.Connection, worker_id: str, kind: str = "bots") -> int:
    return db.fetch_one(
        conn,
        "register_worker",
        dict(id=worker_id, kind=kind, host="h", pid=1, version="t", sandbox=None),
    )["lock_key"]


def report(conn: psycopg.Connection, claim: dict[str, Any], secret: str) -> str:
    return db.fetch_one(
        conn,
        "report_step",
        dict(
            queue=QUEUE,
            run_id=claim["run_id"],
            step_key=claim["step_key"],
            attempt=claim["attempt"],
            secret=secret,
            bot=claim["bot"],
            outcome="completed",
            backoff_s=None,
            note=None,
            message="forged",
            terminal_kind="signal.dispatch.completed",
            terminal_text="step work completed",
            payload=Jsonb({"status": "completed", "output": "forged"}),
            exit_code=0,
        ),
    )["result"]


def test_the_bots_login_ends_no_attempt_it_does_not_hold(conn, logins, open_step):
    run_id, step_key = open_step
    conductor_id = conn.execute(
        "select id from threadline.workers where kind = 'conductor'"
    ).fetchone()["id"]
    with (
        db.connect(logins["bots"]) as process,
        db.connect(logins["bots"]) as bot,
        db.connect(logins["bots"]) as attacker,
    ):
        register(process, "bots-honest")  # holds the process's lock; its slots claim
        claim = db.fetch_one(
            bot, "claim_step", dict(bots=None, worker_id="bots-honest", host="h", lease_s=30)
        )["claim"]
        assert claim["step_key"] == step_key and len(claim["secret"]) >= 32
        # Every bot reads the claims, never their secrets.
        row = attacker.execute(
            "select * from threadline.step_claims where step_key = %s", (step_key,)
        ).fetchone()
        assert claim["secret"] not in str(row)
        before = state_of(conn)
        wrong = "0" * 64
        claim_args = dict(step_key=step_key, attempt=1, secret=wrong)
        for statement, params in (
            # The attempt's own doors, with another secret.
            (db.q("extend_claim"), claim_args | dict(lease_s=30, pgid=None)),
            (db.q("set_claim_pgid"), claim_args | dict(pgid=1)),
            (db.q("cancel_claim"), claim_args),
            # The tables themselves: no claim, worker or run row written by hand.
            (
                "update threadline.step_claims set outcome = 'completed', finished_at = now()"
                " where step_key = %s",
                (step_key,),
            ),
            (
                "insert into threadline.step_claims (step_key, attempt, run_id, worker_id, host,"
                " lease_until) values (%s, 9, %s, 'x', 'h', now())",
                (step_key, run_id),
            ),
            ("update threadline.run_threads set awaiting = false", None),
            (
                "insert into threadline.run_threads (run_id, workflow, state)"
                " values (gen_random_uuid(), 'work', 'pending')",
                None,
            ),
            ("update threadline.workers set stopped_at = now()", None),
            ("select nextval('threadline.worker_lock_keys')", None),
            # A forged terminal: written by hand, or the step released by hand.
            (
                "select threadline.append_entry(%s, 'bot', %s, 'signal.dispatch.completed', %s,"
                " null, 'done', '{}')",
                (run_id, claim["bot"], step_key),
            ),
            (
                "select threadline.append_entry(%s, 'bot', %s, 'progress', %s,"
                " 'terminal:' || %s, 'done', '{}')",
                (run_id, claim["bot"], step_key, step_key),
            ),
            (
                "select threadline.emit_step_done(%s, %s, %s, '{}')",
                (QUEUE, run_id, step_key),
            ),
            # A run started.
            (
                "select * from threadline.spawn_run(%s, 'x', 1, '{}', 'work', null, null, '{}',"
                " '{}', null, 'bots', null)",
                (QUEUE,),
            ),
            ("select absurd.spawn_task(%s, 'x', '{}', '{}')", (QUEUE,)),
            # A conductor's or another bot's process: registered as, beaten for, stopped.
            (
                db.q("register_worker"),
                dict(id="c2", kind="conductor", host="h", pid=1, version="t", sandbox=None),
            ),
            (db.q("heartbeat_worker"), dict(id=conductor_id)),
            (db.q("stop_worker"), dict(id=conductor_id)),
            (db.q("stop_worker"), dict(id="bots-honest")),
        ):
            refused(attacker, statement, params)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            report(attacker, claim, wrong)
        assert state_of(conn) == before
        # The claim's holder, with its secret, ends it: the door still works.
        assert report(bot, claim, claim["secret"]) == "done"
    assert (
        conn.execute(
            "select outcome from threadline.step_claims where step_key = %s", (step_key,)
        ).fetchone()["outcome"]
        == "completed"
    )


def test_the_bots_login_holds_no_table_or_sequence_write(conn):
    assert writes_held(conn, "threadline_bots") == set()


ENGINE_TABLES = ("c", "e", "r", "t", "w")


def engine_state(conn: psycopg.Connection) -> dict[str, Any]:
    """Every row of Absurd's tables and of the process rows, as the owner reads them."""
    tables = [f"absurd.{t}_threadline" for t in ENGINE_TABLES]
    found = {  # as text: a row may hold an infinite timestamp
        t: conn.execute(f"select r::text as row from {t} r order by 1").fetchall()
        for t in (*tables, "absurd.queues")
    }
    # Events emitted: a wait's own row (payload null) comes and goes with the engine's cleanup.
    found["absurd.e_threadline"] = state_of(conn)["events"]
    found["workers"] = conn.execute(  # not their heartbeats, which go on meanwhile
        "select id, kind, lock_key, stopped_at from threadline.workers order by 1"
    ).fetchall()
    return found


def test_the_conductor_login_writes_no_engine_table_by_hand(conn, logins, open_step):
    run_id, step_key = open_step
    conductor_id = conn.execute(
        "select id from threadline.workers where kind = 'conductor'"
    ).fetchone()["id"]
    before = engine_state(conn)
    with db.connect(logins["conductor"]) as attacker:
        statements: list[tuple[str, Any]] = []
        for t in ENGINE_TABLES:
            statements += [
                (f"delete from absurd.{t}_threadline", None),
                (f"update absurd.{t}_threadline set task_id = task_id", None)
                if t != "e"
                else ("update absurd.e_threadline set payload = '{}'", None),
            ]
        statements += [
            (
                "insert into absurd.e_threadline (event_name, payload)"
                " values ('threadline.step.done:' || %s, '{}')",
                (step_key,),
            ),
            (
                "insert into absurd.c_threadline (task_id, checkpoint_name, state)"
                " values (%s, 'forged', '{}')",
                (run_id,),
            ),
            (
                "insert into absurd.t_threadline (task_id, task_name, params, state)"
                " values (gen_random_uuid(), 'x', '{}', 'pending')",
                None,
            ),
            (
                "insert into absurd.r_threadline (run_id, task_id, attempt, state, available_at)"
                " values (gen_random_uuid(), %s, 9, 'pending', now())",
                (run_id,),
            ),
            (
                "insert into absurd.w_threadline (task_id, run_id, step_name, event_name)"
                " values (%s, gen_random_uuid(), 'x', 'y')",
                (run_id,),
            ),
            ("update absurd.queues set cleanup_limit = 1", None),
            ("insert into absurd.queues (queue_name) values ('other')", None),
            ("delete from absurd.queues", None),
            # Absurd's functions it does not call: a queue made, dropped, a task started.
            ("select absurd.drop_queue(%s)", (QUEUE,)),
            ("select absurd.create_queue('other')", None),
            ("select absurd.spawn_task(%s, 'x', '{}', '{}')", (QUEUE,)),
            ("select absurd.cleanup_tasks(%s, 0, 1000)", (QUEUE,)),
            # Process rows: written by hand, or a bot's beaten for.
            ("update threadline.workers set stopped_at = now()", None),
            ("delete from threadline.workers", None),
            (
                "insert into threadline.workers (id, kind, host, pid, lock_key, version)"
                " values ('x', 'bots', 'h', 1, 999999, 't')",
                None,
            ),
            (db.q("heartbeat_worker"), {"id": conductor_id}),  # not from its own session
            (
                db.q("register_worker"),
                {"id": "b", "kind": "bots", "host": "h", "pid": 1, "version": "t", "sandbox": None},
            ),
        ]
        for statement, params in statements:
            refused(attacker, statement, params)
    assert engine_state(conn) == before


def test_the_console_login_gains_no_engine_write_from_the_conductors_functions(
    conn, logins, open_step
):
    run_id, step_key = open_step
    before = engine_state(conn)
    with db.connect(logins["console"]) as console:
        for statement, params in (
            (
                "select absurd.emit_event(%s, 'threadline.step.done:' || %s, '{}')",
                (QUEUE, step_key),
            ),
            (
                "select absurd.set_task_checkpoint_state(%s, %s, 'forged', '{}', null, null)",
                (QUEUE, run_id),
            ),
            ("select * from absurd.claim_task(%s, 'me', 30, 1)", (QUEUE,)),
            ("select absurd.cancel_task(%s, %s)", (QUEUE, run_id)),
            ("select * from absurd.retry_task(%s, %s, '{}')", (QUEUE, run_id)),
            ("select absurd.complete_run(%s, %s, '{}')", (QUEUE, run_id)),
        ):
            refused(console, statement, params)
    assert engine_state(conn) == before


def outbox_state(conn: psycopg.Connection) -> dict[str, Any]:
    """The outbox, the schedule's slots, the resume links and the cleanups no live process ran
    (the conductor's own cleanup may run meanwhile)."""
    found = {
        t: conn.execute(f"select r::text as row from {t} r order by 1").fetchall()
        for t in ("threadline.notifications", "threadline.schedule_ticks")
    }
    found["links"] = conn.execute(
        "select r::text as row from threadline.resume_tokens r order by 1"
    ).fetchall()
    found["cleanups"] = conn.execute(
        "select r::text as row from threadline.cleanups r"
        " where by_worker not in (select id from threadline.workers) order by 1"
    ).fetchall()
    return found


def test_the_conductor_login_sends_no_link_to_a_stranger_nor_fires_a_slot_by_hand(
    conn, logins, open_step
):
    run_id, step_key = open_step
    slot = datetime(2026, 1, 1, tzinfo=UTC)
    before = outbox_state(conn)
    with db.connect(logins["conductor"]) as attacker:
        for statement, params in (
            # The outbox by hand: a row whose links decide as someone, sent anywhere.
            (
                "insert into threadline.notifications (run_id, event, event_key, rule, channel,"
                " target, subject, text) values (%s, 'gate', %s, 0, 'webhook',"
                " 'http://evil.example/', 'alice', 'x')",
                (run_id, step_key),
            ),
            ("update threadline.notifications set target = 'http://evil.example/'", None),
            ("delete from threadline.notifications", None),
            ("select nextval('threadline.notifications_id_seq')", None),
            # Through its door: an account's links to a channel it never registered.
            (
                db.q("enqueue_notification"),
                {
                    "run_id": run_id,
                    "event": "gate",
                    "event_key": step_key,
                    "rule": 0,
                    "channel": "webhook",
                    "target": "http://evil.example/",
                    "subject": "alice",
                    "text": "x",
                },
            ),
            # Schedule slots: by hand, of a workflow with no schedule, a run it did not start.
            (
                "insert into threadline.schedule_ticks (workflow, slot) values ('work', now())",
                None,
            ),
            ("delete from threadline.schedule_ticks", None),
            (db.q("insert_schedule_tick"), {"workflow": "work", "slot": slot, "skipped": 0}),
            (
                db.q("set_schedule_tick_run"),
                {"workflow": "work", "slot": slot, "run_id": run_id},
            ),
            # A resume link deciding as someone no notification was queued for.
            (
                "insert into threadline.resume_tokens (token_hash, run_id, gate_key, subject,"
                " issued_via, expires_at) values ('h', %s, %s, 'alice', 'link', now())",
                (run_id, step_key),
            ),
            (
                db.q("insert_resume_token"),
                {
                    "token_hash": "h",
                    "run_id": run_id,
                    "gate_key": step_key,
                    "subject": "alice",
                    "via": "link",
                    "ttl_s": 60,
                },
            ),
            # Cleanups: by hand, by no conductor, finished twice.
            ("insert into threadline.cleanups (by_worker) values ('x')", None),
            ("update threadline.cleanups set error = 'x'", None),
            (db.q("start_cleanup"), {"by": "conductor-elsewhere"}),
            (
                db.q("finish_cleanup"),
                dict(id=0, runs=0, outputs=0, events=0, workers=0, ticks=0, error=None),
            ),
        ):
            refused(attacker, statement, params)
    assert outbox_state(conn) == before


def test_the_conductor_login_holds_no_engine_outbox_slot_link_cleanup_or_process_write(conn):
    # Nor a run's state, a workflow or a proposal (migration 047): none at all.
    assert writes_held(conn, "threadline_conductor") == set()
