"""The engine's runtime functions, specialised for Threadline's queue (store/specialise.py): a
migrated database runs static statements for it and Absurd's own for any other queue, with the
functions' security settings kept; `absurdctl` still reads Threadline's runs; and the
specialisation drops back to Absurd's own text. Absurd's SDK tests over specialised queues are
tests/absurd_sdk."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import absurdctl
import psycopg

from engine_adapter.model.settings import QUEUE
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import schema, specialise
from engine_adapter.store.embedded import package_bin_dir
from engine_adapter.testing import harness

RECIPE = """
slug: two-steps
steps:
  - {id: a, run_command: "echo one"}
  - {id: b, run_command: "echo two"}
"""


def definition(conn: psycopg.Connection, name: str) -> dict:
    return conn.execute(
        "select pg_get_functiondef(p.oid) as text, p.prosecdef as definer,"
        "       p.proconfig as config"
        "  from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
        " where n.nspname = 'absurd' and p.proname = %s",
        (name,),
    ).fetchone()


def absurdctl_says(url: str, *args: str) -> str:
    env = {**os.environ, "ABSURD_DATABASE_URL": url}
    env["PATH"] = f"{package_bin_dir()}:{env.get('PATH', '')}"  # the embedded server's psql
    done = subprocess.run(
        [str(Path(sys.executable).parent / "absurdctl"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_queues_functions_run_static_statements_and_keep_their_security(conn):
    assert not specialise.current(conn, absurdctl.BUNDLED_SCHEMA_SQL, (QUEUE,))  # plain by default
    schema.set_engine(conn, specialised=True)  # `threadline db migrate --engine specialised`
    bundled = specialise.definitions(absurdctl.BUNDLED_SCHEMA_SQL)
    for name in specialise.RUNTIME:
        fn = definition(conn, name)
        assert f"p_queue_name = '{QUEUE}'" in fn["text"], name
        assert re.search(rf"absurd\.[a-z]_{QUEUE}\b", fn["text"]), name
        # Every EXECUTE is Absurd's own, for other queues: the queue's copy has none.
        assert fn["text"].count("execute") == bundled[name].count("execute"), name
    # Migration 044 made the conductor's engine calls security definer with a fixed path.
    for name in ("claim_task", "await_event", "emit_event", "set_task_checkpoint_state"):
        fn = definition(conn, name)
        assert fn["definer"], name
        assert fn["config"] == ["search_path=pg_catalog, pg_temp"], name
    assert not definition(conn, "spawn_task")["definer"]
    assert schema.migrate(conn) == []  # applied once; the same rewrite is not applied again


def test_runs_go_through_the_static_statements_and_absurdctl_reads_them(conn, apply, procs, db_url):
    schema.set_engine(conn, specialised=True)
    apply(RECIPE)
    procs.start("conductor", wait=True)
    procs.start("bots", wait=True)
    run_id = str(spawn(conn, "two-steps").run_id)
    view = harness.wait_for_state(procs.url, run_id, "completed", timeout=60)
    assert [s["status"] for s in view["steps"]] == ["completed", "completed"]
    assert absurdctl_says(db_url, "schema-version").strip().lstrip("v").startswith("0.5.1")
    assert QUEUE in absurdctl_says(db_url, "list-queues")
    assert run_id in absurdctl_says(db_url, "list-tasks", f"--queue={QUEUE}")
    dump = absurdctl_says(db_url, "dump-task", f"--task-id={run_id}")
    assert "completed" in dump


def test_the_specialisation_drops_back_to_absurds_own_text_and_stays_dropped(conn):
    bundled = specialise.definitions(absurdctl.BUNDLED_SCHEMA_SQL)
    schema.set_engine(conn, specialised=True)
    schema.set_engine(conn, specialised=False)  # `threadline db migrate --engine plain`
    assert schema.migrate(conn) == []  # a later migrate leaves it plain
    for name in specialise.RUNTIME:
        fn = definition(conn, name)
        body = bundled[name].split("\nas $$\n", 1)[1].removesuffix("$$;")
        assert body.strip() in fn["text"], name
        assert "#variable_conflict" not in fn["text"], name
    assert definition(conn, "claim_task")["definer"]


def test_a_function_absurd_made_again_is_specialised_again_by_the_next_migrate(conn):
    schema.set_engine(conn, specialised=True)
    bundled = specialise.definitions(absurdctl.BUNDLED_SCHEMA_SQL)
    conn.execute(bundled["emit_event"].replace("create function", "create or replace function"))
    assert not specialise.current(conn, absurdctl.BUNDLED_SCHEMA_SQL, (QUEUE,))
    assert schema.migrate(conn) == [schema.SPECIALISED_ENGINE]
    assert f"absurd.e_{QUEUE}" in definition(conn, "emit_event")["text"]
    assert specialise.current(conn, absurdctl.BUNDLED_SCHEMA_SQL, (QUEUE,))


def test_the_command_line_turns_it_on_and_off(conn, db_url):
    on = harness.run_cli(db_url, "db", "migrate", "--engine", "specialised")
    assert on.returncode == 0, on.stderr
    assert "run specialised for Threadline's queue" in on.stdout
    assert specialise.current(conn, absurdctl.BUNDLED_SCHEMA_SQL, (QUEUE,))
    again = harness.run_cli(db_url, "db", "migrate")  # a plain migrate keeps it on
    assert again.stdout.startswith("up to date"), again.stdout
    assert specialise.current(conn, absurdctl.BUNDLED_SCHEMA_SQL, (QUEUE,))
    off = harness.run_cli(db_url, "db", "migrate", "--engine", "plain")
    assert off.returncode == 0, off.stderr
    assert f"absurd.r_{QUEUE}" not in definition(conn, "claim_task")["text"]
    bad = harness.run_cli(db_url, "db", "migrate", "--engine", "fast")
    assert bad.returncode != 0 and "invalid choice: 'fast'" in bad.stderr
