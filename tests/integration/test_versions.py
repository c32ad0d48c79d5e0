"""A workflow's versions: immutable in the database (even for its owner), listed by `recipe
history`, compared by `recipe diff`, restored by `recipe rollback` as a new version that records
its source, while a run spawned before keeps its own snapshot."""

from __future__ import annotations

import json

import psycopg
import pytest

from engine_adapter.runs.spawn import spawn
from engine_adapter.testing import harness

V1 = "slug: shipit\nsteps:\n  - id: say\n    run_command: echo one\n"
V2 = V1.replace("echo one", "echo two")


def versions(conn) -> list[tuple]:
    return [
        (r["version"], r["source"], r["rolled_back_from"])
        for r in conn.execute(
            "select version, source, rolled_back_from from threadline.workflow_versions"
            " where slug = 'shipit' order by version"
        )
    ]


def test_versions_are_immutable_even_for_the_owner(conn, apply):
    apply(V1)
    for statement in (
        "update threadline.workflow_versions set source = 'update'",
        "delete from threadline.workflow_versions",
        "truncate threadline.workflow_versions cascade",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
            with conn.transaction():
                conn.execute(statement)
        assert "workflow versions are immutable" in str(info.value)
    assert versions(conn) == [(1, "create", None)]


def test_history_diff_and_rollback(db_url, conn, apply, procs):
    apply(V1)
    apply(V2)
    history = json.loads(harness.run_cli(db_url, "recipe", "history", "shipit", "--json").stdout)
    assert [v["version"] for v in history] == [2, 1]
    v1_hash = history[1]["hash"]
    text = harness.run_cli(db_url, "recipe", "history", "shipit").stdout
    assert f"v1    sha256:{v1_hash[:12]}  create" in text
    diff = harness.run_cli(db_url, "recipe", "diff", "shipit", "1", "2").stdout
    assert "-    run_command: echo one" in diff and "+    run_command: echo two" in diff
    same = harness.run_cli(db_url, "recipe", "diff", "shipit", v1_hash[:8], "1").stdout
    assert same.strip() == "(no difference)"

    procs.start("conductor")
    procs.start("bots")
    before = spawn(conn, "shipit").run_id  # on version 2
    back = harness.run_cli(db_url, "recipe", "rollback", "shipit", "--to", v1_hash[:10])
    assert back.returncode == 0 and back.stdout.strip() == "shipit: v3, a copy of v1"
    assert versions(conn) == [(1, "create", None), (2, "update", None), (3, "rollback", 1)]
    current = conn.execute("select hash from threadline.workflows where slug = 'shipit'")
    assert current.fetchone()["hash"] == v1_hash  # the same recipe, the same hash
    after = spawn(conn, "shipit").run_id
    outputs = [
        harness.wait_for_state(procs.url, r, "completed", timeout=30)["steps"][0]["output"]
        for r in (before, after)
    ]
    assert outputs == ["two\n", "one\n"]  # the run spawned before kept its snapshot

    again = harness.run_cli(db_url, "recipe", "rollback", "shipit", "--to", "1")
    assert again.returncode == 2 and "nothing to roll back" in again.stderr


def test_bad_references_name_the_problem_and_write_nothing(db_url, conn, apply):
    apply(V1)
    apply(V2)
    cases = [
        (("rollback", "shipit", "--to", "9"), "workflow 'shipit' has no version 9"),
        (("rollback", "shipit", "--to", "abc"), "6 or more hex digits"),
        (("rollback", "shipit", "--to", "ffffffff"), "no version with hash ffffffff"),
        (("rollback", "nope", "--to", "1"), "no workflow 'nope'"),
        (("diff", "shipit", "1", "zz"), "6 or more hex digits"),
    ]
    for args, says in cases:
        done = harness.run_cli(db_url, "recipe", *args)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
    assert versions(conn) == [(1, "create", None), (2, "update", None)]
