"""Explore from Python (issue 25): the read schema's views, documented and read-only, and
connect()'s client over a database with real runs (a conductor and a bot process ran them)."""

from __future__ import annotations

import warnings

import pandas as pd
import psycopg
import pytest

from engine_adapter import connect
from engine_adapter.explore.client import ReadOnlyClient
from engine_adapter.model.identity import cli_actor
from engine_adapter.store import db
from engine_adapter.testing import harness

VIEWS = ("runs", "steps", "attempts", "thread", "gate_waits", "agent_turns", "workers")

FAILING = """
slug: breaks
steps:
  - id: first
    run_command: echo one
  - id: second
    run_command: echo failing >&2; exit 3
"""

GATED = """
slug: gated
steps:
  - id: build
    run_command: echo built
  - id: ship
    human_gate: "Ship it?"
    self_approval: true
"""


def view_columns(conn: psycopg.Connection) -> list[dict]:
    return conn.execute(
        """select c.relname as view, a.attname as col,
                  col_description(c.oid, a.attnum) as doc, obj_description(c.oid) as view_doc
             from pg_class c join pg_namespace n on n.oid = c.relnamespace
             join pg_attribute a on a.attrelid = c.oid and a.attnum > 0
            where n.nspname = 'threadline_read' and c.relkind = 'v'"""
    ).fetchall()


def test_every_view_and_column_of_the_read_schema_is_documented(conn):
    rows = view_columns(conn)
    assert {r["view"] for r in rows} == set(VIEWS)
    bare = [f"{r['view']}.{r['col']}" for r in rows if not (r["doc"] or "").strip()]
    assert not bare, f"read-schema columns without a comment: {bare}"
    assert all((r["view_doc"] or "").strip() for r in rows)
    version = conn.execute("select threadline_read.read_schema_version() as v").fetchone()
    assert version["v"] == 1
    # A step key's path and try, an agent round's mark left out of the path (names.step_key).
    parts = conn.execute(
        "select threadline_read.step_of(k) as step, threadline_read.try_of(k) as try"
        " from (values ('0190:each[2]/deploy~r2:3')) v (k)"
    ).fetchone()
    assert parts == {"step": "each[2]/deploy", "try": 3}


def test_the_viewer_reads_every_view_and_writes_through_none(logins):
    with psycopg.connect(logins["viewer"], autocommit=True) as viewer:
        for view in VIEWS:
            viewer.execute(f"select * from threadline_read.{view} limit 1").fetchall()
        refused = (
            psycopg.errors.InsufficientPrivilege,
            psycopg.errors.ObjectNotInPrerequisiteState,
        )
        for view in VIEWS:
            with pytest.raises(refused):
                viewer.execute(f"delete from threadline_read.{view}")
            held = viewer.execute(
                "select has_table_privilege(current_user, %s, 'INSERT,UPDATE,DELETE,TRUNCATE')",
                (f"threadline_read.{view}",),
            ).fetchone()
            assert held == (False,), f"the viewer may write through {view}"


def test_a_read_only_client_refuses_to_act_and_to_write(logins):
    client = connect(url=logins["viewer"])
    with pytest.raises(ReadOnlyClient, match="read-only; connect\\(write=True\\)"):
        client.spawn("anything")
    with pytest.raises(ReadOnlyClient, match="cannot approve"):
        client.approve("00000000-0000-0000-0000-000000000000")
    # Even on a login that may write, a read-only client's transactions are read-only.
    owner = connect(url=logins["console"])
    with pytest.raises(Exception, match="read-only transaction"):
        with owner.engine.connect() as c:
            c.exec_driver_sql("create temporary table t (x int)")
    with pytest.raises(ValueError, match="run must be a full run id, not 'abc'"):
        client.steps(run="abc")


def test_connect_lists_runs_steps_attempts_gates_and_tokens(conn, apply, procs, db_url, logins):
    apply(FAILING)
    apply(GATED)
    procs.start("conductor")
    procs.start("bots")
    writer = connect(url=db_url, write=True)
    failed = writer.spawn("breaks", request_id="r1")
    assert writer.spawn("breaks", request_id="r1") == failed  # one run per request id
    gated = writer.spawn("gated")
    harness.wait_for_state(db_url, failed, "failed")
    harness.wait_for_state(db_url, gated, "waiting")
    writer.approve(gated, reason="fine")
    harness.wait_for_state(db_url, gated, "completed")

    # Agent turns as a bot's agent writes them (the thread is the journal).
    for turn, (tin, tout, cost) in enumerate([(100, 20, 0.5), (40, 7, None)], start=1):
        conn.execute(
            "select threadline.append_entry(%s, 'bot', 'shell', 'agent.assistant', %s, %s,"
            " 'turn', %s)",
            (
                gated,
                f"{gated}:build:1",
                f"agent:{gated}:build:1:{turn}:assistant",
                psycopg.types.json.Jsonb(
                    {
                        "turn": turn,
                        "usage": {"in": tin, "out": tout}
                        | ({"cost_usd": cost} if cost is not None else {}),
                    }
                ),
            ),
        )

    client = connect(url=logins["viewer"])
    runs = client.runs()
    assert set(runs.run_id.astype(str)) == {failed, gated}
    broke = client.runs(state="failed")
    assert list(broke.run_id.astype(str)) == [failed]
    assert broke.failed_step[0] == "second"
    assert list(client.runs(workflow="gated").run_id.astype(str)) == [gated]
    assert list(client.runs(trigger="manual").run_id.astype(str)) != []
    assert client.runs(since="2999-01-01").empty

    steps = client.steps(run=failed)
    by_step = {r.step: r for r in steps.itertuples()}
    assert by_step["first"].outcome == "completed"
    assert by_step["second"].outcome == "failed" and by_step["second"].exit_code == 3
    assert "exit 3" in by_step["second"].error
    assert (steps.duration_s >= 0).all()
    assert list(client.steps(outcome="failed").step) == ["second"]

    attempts = client.attempts(run=failed)
    assert set(attempts.step) == {"first", "second"}
    assert (attempts.duration_s >= 0).all()
    assert set(attempts[attempts.step == "second"].outcome) == {"failed"}

    gates = client.gates(workflow="gated")
    assert len(gates) == 1 and gates.decision[0] == "approve" and gates.wait_s[0] >= 0
    assert gates.decided_by[0] == cli_actor().name and not gates.open[0]

    thread = client.thread(failed)
    assert list(thread.seq) == sorted(thread.seq) and len(thread) > 2

    tokens = client.tokens(run=gated)
    journal = db.fetch_row(conn, "run_agent_use", {"run_id": gated, "limit": 100})
    assert tokens.tokens_in.sum() == journal["in"] == 140
    assert tokens.tokens_out.sum() == journal["out"] == 27
    assert tokens.cost_usd.sum() == journal["cost_usd"] == 0.5

    workers = client.workers(alive=True)
    assert set(workers.kind) == {"conductor", "bots"}
    assert (workers.beat_age_s >= 0).all()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pandas warns on a raw DBAPI connection
        for view in VIEWS:
            pd.read_sql(f"select * from threadline_read.{view}", client.engine)
    assert client.schema_version() == 1


def test_connect_finds_the_homes_logins(tmp_path, logins, db_url, monkeypatch):
    from engine_adapter.model.settings import DATABASE_URL_ENV, write_credentials

    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    write_credentials({"url": db_url, "roles": logins}, tmp_path)
    reader = connect(home=tmp_path)
    assert reader.engine.url.username == psycopg.conninfo.conninfo_to_dict(logins["viewer"])["user"]
    assert connect(home=tmp_path, write=True).write
    write_credentials({"roles": logins}, tmp_path)
    with pytest.raises(Exception, match=r"no write login in .*credentials\.json"):
        connect(home=tmp_path, write=True)
