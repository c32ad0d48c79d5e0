"""Spawn idempotency, recipe versions, migrations, health and the CLI (as a real subprocess)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from engine_adapter.catalog.workflows import WorkflowNotFound
from engine_adapter.read.read_model import health
from engine_adapter.runs.spawn import SpawnError, spawn
from engine_adapter.store import schema
from engine_adapter.store.embedded import EmbeddedPostgres
from engine_adapter.testing import harness

HELLO = Path(__file__).resolve().parents[2] / "assets" / "recipes" / "hello.yaml"


def cli(url: str, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    return harness.run_cli(url, *args, home=home)


def count(conn, table: str) -> int:
    return conn.execute(f"select count(*) as n from threadline.{table}").fetchone()["n"]


def test_idempotent_spawn_returns_the_existing_run(conn, apply):
    apply(HELLO.read_text())
    first = spawn(conn, "hello", {"name": "a"}, idempotency_key="k-1")
    again = spawn(conn, "hello", {"name": "b"}, idempotency_key="k-1")
    other = spawn(conn, "hello", {"name": "a"}, idempotency_key="k-2")
    assert first.created and not again.created and other.created
    assert again.run_id == first.run_id != other.run_id
    assert count(conn, "run_threads") == 2
    payload = conn.execute(
        "select payload from threadline.run_threads where run_id = %s", (first.run_id,)
    ).fetchone()["payload"]
    assert payload == {"name": "a"}


def test_editing_a_recipe_never_changes_a_run_in_flight(conn, apply):
    apply(HELLO.read_text())
    run_id = spawn(conn, "hello", {"name": "a"}).run_id
    apply(HELLO.read_text().replace("echo done", "echo changed"))
    versions = conn.execute(
        "select version, source from threadline.workflow_versions where slug = 'hello' "
        "order by version"
    ).fetchall()
    assert [(v["version"], v["source"]) for v in versions] == [(1, "create"), (2, "update")]
    snapshot = conn.execute(
        "select recipe, workflow_version from threadline.run_threads where run_id = %s", (run_id,)
    ).fetchone()
    assert snapshot["workflow_version"] == 1
    assert snapshot["recipe"]["steps"][1]["run_command"] == "echo done"


def test_spawn_rejects_bad_input_and_writes_nothing(conn, apply):
    apply(HELLO.read_text())
    with pytest.raises(SpawnError, match="payload must be a JSON object"):
        spawn(conn, "hello", ["not", "an", "object"])
    with pytest.raises(WorkflowNotFound, match="no workflow 'nope'"):
        spawn(conn, "nope")
    with pytest.raises(SpawnError, match=r"payload\.who\[1\]: contains a NUL character"):
        spawn(conn, "hello", {"who": ["ok", "a\x00b"]})
    assert count(conn, "run_threads") == 0
    assert conn.execute("select count(*) as n from absurd.t_threadline").fetchone()["n"] == 0


def test_migrate_is_idempotent(conn):
    assert schema.migrate(conn) == []
    names = [r["name"] for r in schema.applied_migrations(conn)]
    assert names[0] == f"absurd-{schema.ABSURD_VERSION}" and "001_core" in names


def test_recipe_validate_names_the_path_and_apply_writes_nothing(db_url, conn, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("slug: bad\nsteps:\n  - id: one\n    run_command: echo\n    timeout: 10x\n")
    result = cli(db_url, "recipe", "validate", str(bad))
    assert result.returncode == 10
    assert 'steps[0].timeout: "10x" is not a duration' in result.stdout
    result = cli(db_url, "recipe", "apply", str(bad))
    assert result.returncode == 10 and "steps[0].timeout" in result.stderr
    assert count(conn, "workflows") == 0 and count(conn, "workflow_versions") == 0


def test_cli_end_to_end(db_url, procs, tmp_path):
    assert cli(db_url, "recipe", "apply", str(HELLO)).stdout.strip() == "hello v1"
    assert "(unchanged)" in cli(db_url, "recipe", "apply", str(HELLO)).stdout
    procs.start("conductor")
    procs.start("bots")
    out = json.loads(
        cli(
            db_url,
            "spawn",
            "hello",
            "--payload",
            '{"name": "cli"}',
            "--idempotency-key",
            "x",
            "--json",
        ).stdout
    )
    assert out["created"] is True
    again = json.loads(cli(db_url, "spawn", "hello", "--idempotency-key", "x", "--json").stdout)
    assert again == {"run_id": out["run_id"], "created": False}
    harness.wait_for_state(db_url, out["run_id"], "completed")
    shown = json.loads(cli(db_url, "show", out["run_id"], "--json").stdout)
    assert set(shown) >= {"run_id", "workflow", "state", "steps", "thread"}
    assert [(s["id"], s["kind"], s["status"], s["attempts"]) for s in shown["steps"]] == [
        ("greet", "run_command", "completed", 1),
        ("done", "run_command", "completed", 1),
    ]
    assert shown["steps"][0]["output"].strip() == "hello cli"
    assert set(shown["thread"][0]) == {
        "seq",
        "author_kind",
        "author",
        "kind",
        "step_key",
        "text",
        "created_at",
    }
    runs = json.loads(cli(db_url, "runs", "--json", "--workflow", "hello").stdout)
    assert runs["health"] == "ok" and runs["runs"][0]["run_id"] == out["run_id"]
    none = cli(db_url, "runs", "--state", "waiting").stdout.splitlines()
    assert none[-1] == "no run matches the filter (state waiting)"  # runs there are
    bad = cli(db_url, "runs", "--state", "bogus")
    assert bad.returncode == 2 and "state: 'bogus' is not a run state" in bad.stderr
    refused = cli(db_url, "approve", out["run_id"])
    assert refused.returncode == 2 and "not waiting at a gate" in refused.stderr
    h = cli(db_url, "health", "--json")
    assert h.returncode == 0 and json.loads(h.stdout)["status"] == "ok"


def test_health_turns_down_the_moment_the_conductor_is_killed(conn, procs):
    assert health(conn)["status"] == "down"  # nothing running yet
    conductor = procs.start("conductor")
    procs.start("bots")
    harness.wait_for(lambda: health(conn)["status"] == "ok", what="health ok")
    harness.kill(conductor)
    # The server drops the liveness lock as soon as it sees the socket close: well within a second.
    h = harness.wait_for(
        lambda: (h := health(conn))["status"] == "down" and h, timeout=1.0, what="health down"
    )
    assert not any(c["alive"] for c in h["conductors"])


def test_health_says_stopped_for_a_clean_stop_and_dead_for_a_kill(conn, procs, db_url):
    conductor = procs.start("conductor")
    bots = procs.start("bots")
    procs.wait_alive("conductor")
    procs.wait_alive("bots")
    harness.kill(bots, signal.SIGTERM)  # a clean stop
    harness.kill(conductor)  # SIGKILL: it vanishes without a word

    # The server drops the killed one's liveness lock once it sees its socket close, which on a
    # loaded machine can come a moment after the process is gone (well within a second).
    def conductor_gone() -> dict | None:
        h = health(conn)
        return None if any(c["alive"] for c in h["conductors"]) else h

    h = harness.wait_for(conductor_gone, timeout=1.0, what="the killed conductor's lock to go")
    assert [(b["alive"], b["stopped"]) for b in h["bots"]] == [(False, True)]
    assert [(c["alive"], c["stopped"]) for c in h["conductors"]] == [(False, False)]
    lines = cli(db_url, "health").stdout.splitlines()
    assert [line.split()[:2] for line in lines[1:3]] == [["conductor", "DEAD"], ["bot", "stopped"]]


@pytest.mark.parametrize("kind", ["conductor", "bots"])
def test_a_stop_the_moment_a_process_has_registered_is_a_clean_stop(conn, procs, kind):
    # The SIGTERM comes right after its liveness lock is taken, before the process goes on: the
    # gap in which a stop once took the default action and left health saying DEAD.
    proc = procs.start(kind, env={"THREADLINE_STOP_AT": "registered"})
    assert proc.wait(timeout=60) == 0
    rows = health(conn)["conductors" if kind == "conductor" else "bots"]
    assert [(r["alive"], r["stopped"]) for r in rows] == [(False, True)]


def test_on_a_fresh_home_commands_start_the_embedded_server_themselves(tmp_path):
    home = tmp_path / "fresh-home"
    env = {k: v for k, v in os.environ.items() if k != "THREADLINE_DATABASE_URL"}
    env["THREADLINE_HOME"] = str(home)

    def threadline(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "engine_adapter.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    try:
        migrated = threadline("db", "migrate")
        assert migrated.returncode == 0, migrated.stderr
        assert (
            "starting the embedded PostgreSQL" in migrated.stderr
            and "applied: absurd-" in migrated.stdout
        )
        assert threadline("db", "migrate").stdout.startswith("up to date")
        EmbeddedPostgres(home).stop()
        listed = threadline("runs", "--json")  # a stopped server is started again
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["runs"] == []
        assert threadline("db", "url", "--role", "bots").stdout.startswith("postgresql://")
    finally:
        harness.remove_server(home)


SYSTEM_PG = "postgresql://postgres@127.0.0.1:5432/test"


def test_threadline_database_url_points_at_another_server():
    """The machine's own PostgreSQL (an older server) works through THREADLINE_DATABASE_URL."""
    try:
        admin = psycopg.connect(SYSTEM_PG, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError:
        pytest.skip(f"no PostgreSQL at {SYSTEM_PG} on this machine")
    name = "threadline_other_server_test"
    with admin:
        admin.execute(f"drop database if exists {name}")
        admin.execute(f"create database {name}")
    url = SYSTEM_PG.rsplit("/", 1)[0] + "/" + name
    try:
        assert cli(url, "db", "migrate").returncode == 0
        assert cli(url, "recipe", "apply", str(HELLO)).returncode == 0
        home = Path(os.environ.get("TMPDIR", "/tmp")) / name
        conductor = harness.start_process("conductor", url, home)
        bots = harness.start_process("bots", url, home)
        try:
            run_id = cli(url, "spawn", "hello", "--payload", '{"name": "pg15"}').stdout.strip()
            view = harness.wait_for_state(url, run_id, "completed")
            assert view["steps"][0]["output"].strip() == "hello pg15"
        finally:
            harness.kill(conductor)
            harness.kill(bots)
    finally:
        with psycopg.connect(SYSTEM_PG, autocommit=True) as admin:
            admin.execute(f"drop database if exists {name} with (force)")


def test_one_bot_per_thread(conn, apply):
    from engine_adapter.runs import thread_entries

    apply(HELLO.read_text())
    run_id = spawn(conn, "hello", {"name": "a"}).run_id
    assert (
        conn.execute(
            "select bot from threadline.run_threads where run_id = %s", (run_id,)
        ).fetchone()["bot"]
        == "shell"
    )
    with pytest.raises(psycopg.errors.RaiseException, match='thread is bound to bot "shell"'):
        with conn.transaction():
            thread_entries.append(conn, run_id, "bot", "intruder", "message", "hi")
    assert thread_entries.append(conn, run_id, "bot", "shell", "message", "hi") == 2


def test_health_degraded_when_instructions_wait_with_no_live_bot(conn, apply, procs):
    apply(HELLO.read_text())
    procs.start("conductor")
    harness.wait_for(lambda: health(conn)["status"] == "ok", what="health ok")
    spawn(conn, "hello", {"name": "nobody home"})
    h = harness.wait_for(
        lambda: (h := health(conn))["status"] == "degraded" and h,
        timeout=10,
        what="health degraded",
    )
    assert h["instructions_waiting"] == 1 and h["bots"] == []
    procs.start("bots")
    harness.wait_for(lambda: health(conn)["status"] == "ok", timeout=30, what="health ok again")


def test_show_into_a_closed_pipe_ends_quietly(conn, apply, db_url):
    from engine_adapter.runs import thread_entries

    apply(HELLO.read_text())
    run_id = spawn(conn, "hello", {"name": "a"}).run_id
    with conn.transaction():
        for i in range(400):  # more than a pipe holds, so the writer meets the closed end
            thread_entries.append(
                conn, run_id, "system", "threadline", "note", f"line {i} " + "x" * 300
            )
    env = dict(os.environ, THREADLINE_DATABASE_URL=db_url)
    done = subprocess.run(
        f"{sys.executable} -m engine_adapter.cli show {run_id} | head -n 1",
        shell=True,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.startswith(f"run {run_id}")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
