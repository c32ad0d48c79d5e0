"""Locks on a run's row leave its key alone: a child run's thread and its parent's are written
at the same moment without a deadlock (a child row references its parent's key)."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db

RECIPE = """
slug: locks
steps:
  - id: one
    run_command: "true"
"""


def child_of(conn: psycopg.Connection, parent: str) -> str:
    row = conn.execute(
        "insert into threadline.run_threads (run_id, workflow, workflow_version, recipe_hash,"
        " recipe, payload, bot, trigger, state, parent_run_id)"
        " select gen_random_uuid(), workflow, workflow_version, recipe_hash, recipe, '{}', bot,"
        " jsonb_build_object('kind', 'event', 'what', 'branch'), 'running', run_id"
        " from threadline.run_threads where run_id = %s returning run_id",
        (parent,),
    ).fetchone()
    assert row is not None
    return str(row["run_id"])


def note(conn: psycopg.Connection, run_id: str, text: str) -> None:
    conn.execute(
        "select threadline.append_entry(%s, 'system', 'threadline', 'note', null, null, %s, null)",
        (run_id, text),
    )


def test_a_child_thread_is_written_twice_while_its_parent_is_being_written(conn, apply, db_url):
    """The shape of a bot's report on a branch (its reply, then its terminal signal: the child's
    row updated twice, so Postgres re-checks the parent's key) while another transaction holds
    the parent's row to append to it. With `for update` the report waited on the parent's
    holder (and deadlocked when that holder came for the child); it goes straight through."""
    apply(RECIPE)
    parent = str(spawn(conn, "locks").run_id)
    child = child_of(conn, parent)
    with db.connect(db_url) as holder, db.connect(db_url) as reporter:
        with holder.transaction():
            note(holder, parent, "the parent's thread, held open")
            reporter.execute("set lock_timeout = '3s'")
            with reporter.transaction():
                note(reporter, child, "a branch's reply")
                note(reporter, child, "its terminal signal")
    texts = [
        r["text"]
        for r in conn.execute(
            "select text from threadline.thread_entries where run_id = %s order by seq", (child,)
        )
    ]
    assert texts == ["a branch's reply", "its terminal signal"]


def test_writing_a_run_twice_in_a_transaction_leaves_its_workflow_row_alone(conn, apply):
    """Every run of a workflow shares the workflow's row: a step's writes to its run (an entry,
    then the run armed) must not lock it each time (migration 052), or concurrent steps of one
    workflow's runs contend on it."""
    apply(RECIPE)
    run_id = spawn(conn, "locks").run_id
    before = conn.execute("select xmax::text from threadline.workflows where slug = 'locks'")
    xmax = before.fetchone()["xmax"]
    with conn.transaction():
        note(conn, run_id, "one")
        note(conn, run_id, "two")  # the run's row updated twice by this transaction
        mine = conn.execute("select pg_current_xact_id()::text as x").fetchone()["x"]
    after = conn.execute("select xmax::text from threadline.workflows where slug = 'locks'")
    assert after.fetchone()["xmax"] == xmax != mine


def test_an_update_of_a_run_locks_its_row_no_earlier_than_it_writes_it(conn, apply):
    """Postgres locks a row before updating it when its table has a BEFORE UPDATE row trigger,
    whatever columns the trigger names, and the lock (a WAL record of its own) stays on the new
    version as its xmax. The workflow's check runs after the write (migration 056), so an
    update that leaves the workflow alone leaves the new version unlocked."""
    apply(RECIPE)
    run_id = spawn(conn, "locks").run_id
    with conn.transaction():
        conn.execute(
            "update threadline.run_threads set updated_at = now() where run_id = %s", (run_id,)
        )
    row = conn.execute(
        "select xmax::text as xmax from threadline.run_threads where run_id = %s", (run_id,)
    ).fetchone()
    assert row["xmax"] == "0", row


def test_a_run_is_written_only_with_a_workflow_that_exists(conn, apply):
    apply(RECIPE)
    run_id = spawn(conn, "locks").run_id
    for attempt in (
        lambda: conn.execute(
            "update threadline.run_threads set workflow = 'nope' where run_id = %s", (run_id,)
        ),
        lambda: conn.execute(
            "insert into threadline.run_threads (run_id, workflow, workflow_version,"
            " recipe_hash, recipe, payload, bot, trigger, state)"
            " select gen_random_uuid(), 'nope', workflow_version, recipe_hash, recipe, '{}',"
            " bot, trigger, 'running' from threadline.run_threads where run_id = %s",
            (run_id,),
        ),
        lambda: conn.execute("delete from threadline.workflows where slug = 'locks'"),
        lambda: conn.execute("update threadline.workflows set slug = 'other' where slug = 'locks'"),
    ):
        try:
            with conn.transaction():
                attempt()
        except psycopg.errors.ForeignKeyViolation as err:
            assert "workflow" in str(err)
        else:
            raise AssertionError("a run was left without its workflow")
    assert (
        conn.execute(
            "select count(*) as n from threadline.run_threads where workflow = 'locks'"
        ).fetchone()["n"]
        == 1
    )


CAPPED = """
slug: capped
max_concurrent_runs: 1
steps:
  - id: one
    run_command: "true"
"""


def admission_locks_after_admitting(db_url: str, workflow: str) -> int:
    """Advisory locks the conductor's transaction holds once it admitted `workflow`'s runs, as
    a run's end does."""
    with db.connect(db_url, role="conductor") as c, c.transaction(force_rollback=True):
        c.execute("select threadline.admit_queued('threadline', %s)", (workflow,))
        row = c.execute(
            "select count(*) as n from pg_locks"
            " where locktype = 'advisory' and pid = pg_backend_pid()"
        ).fetchone()
        return int(row["n"])


def test_a_run_end_takes_the_admission_lock_only_where_runs_can_wait(conn, apply, db_url):
    """Every end of an uncapped workflow's runs took the workflow's admission lock to its
    commit, so they committed one at a time (migration 054); a capped one still takes it."""
    apply(RECIPE)
    apply(CAPPED)
    assert admission_locks_after_admitting(db_url, "locks") == 0
    assert admission_locks_after_admitting(db_url, "capped") == 1


def wal_records_of(
    conn: psycopg.Connection, write: Callable[[], None], relation: str
) -> list[tuple[str, str]]:
    """(resource manager, record type) of each heap WAL record written in `relation` while
    `write` ran in a transaction (its savepoints included; nothing else writes this database)."""
    conn.execute("create extension if not exists pg_walinspect")
    start = conn.execute("select pg_current_wal_insert_lsn() as lsn").fetchone()["lsn"]
    with conn.transaction():
        write()
    rows = conn.execute(
        "select resource_manager as rm, record_type as kind"
        " from pg_get_wal_records_info(%s, pg_current_wal_insert_lsn())"
        " where resource_manager = 'Heap'"
        " and block_ref ~ ('rel \\d+/\\d+/' || pg_relation_filenode(%s) || '( |$)')",
        (start, relation),
    )
    return [(r["rm"], r["kind"]) for r in rows]


def test_an_entry_locks_its_run_only_with_the_write_that_numbers_it(conn, apply):
    """A thread entry took its number under a row lock of its own (a WAL record) and its foreign
    key locked the run's row again; now the update that takes the number is the lock (migration
    057): eleven lock records fewer per three-step workflow."""
    apply(RECIPE)
    run_id = spawn(conn, "locks").run_id
    records = wal_records_of(conn, lambda: note(conn, run_id, "one"), "threadline.run_threads")
    assert records == [("Heap", "HOT_UPDATE")], records
    seqs = conn.execute(
        "select seq, next_seq from threadline.thread_entries join threadline.run_threads"
        " using (run_id) where run_id = %s order by seq",
        (run_id,),
    ).fetchall()
    assert [(r["seq"], r["next_seq"]) for r in seqs] == [(1, 3), (2, 3)]


def test_an_entry_is_written_only_into_a_run_that_exists_and_a_run_goes_only_with_its_entries(
    conn, apply
):
    apply(RECIPE)
    run_id = spawn(conn, "locks").run_id
    with pytest.raises(psycopg.errors.NoDataFound, match="not found"):
        note(conn, "00000000-0000-0000-0000-000000000000", "nowhere")
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="still has thread entries"):
        conn.execute("delete from threadline.run_threads where run_id = %s", (run_id,))
    count = conn.execute("select count(*) as n from threadline.thread_entries").fetchone()["n"]
    assert count == 1  # the opening note, still there with its run


def test_an_entry_written_before_leaves_the_run_numbered_as_it_was(conn, apply):
    """A replayed entry (its dedupe key written before) takes no number."""
    apply(RECIPE)
    run_id = spawn(conn, "locks").run_id
    sql = (
        "select threadline.append_entry(%s, 'system', 'threadline', 'note', null, 'once', %s,"
        " null) as seq"
    )
    first = conn.execute(sql, (run_id, "first")).fetchone()["seq"]
    again = conn.execute(sql, (run_id, "again")).fetchone()["seq"]
    after = conn.execute(sql.replace("'once'", "null"), (run_id, "after")).fetchone()["seq"]
    assert (first, again, after) == (2, None, 3)


def test_a_count_that_moves_updates_its_row_without_locking_it_first(conn, apply):
    """A count's row almost always exists: an upsert locked it (a WAL record) before updating
    it; an update writes only the row (migration 058)."""
    apply(RECIPE)
    spawn(conn, "locks")  # the count's row of this day, workflow, state and shard
    records = wal_records_of(conn, lambda: spawn(conn, "locks"), "threadline.run_counts")
    assert records == [("Heap", "HOT_UPDATE")], records
    total = conn.execute("select sum(runs) as n from threadline.run_counts").fetchone()["n"]
    assert total == 2


def test_a_new_checkpoint_is_journaled_by_a_plain_insert_and_a_rewrite_replaces_it(conn, apply):
    """Not speculatively, as an upsert inserts (a confirmation record follows); an attempt
    writing the checkpoint again updates its journal row (migration 058)."""
    apply(RECIPE)
    run_id = spawn(conn, "locks").run_id
    owner = conn.execute(
        "select run_id from absurd.r_threadline where task_id = %s", (run_id,)
    ).fetchone()["run_id"]

    def checkpoint(state: str) -> None:
        conn.execute(
            "select absurd.set_task_checkpoint_state('threadline', %s, 'probe', %s::jsonb, %s)",
            (run_id, f'"{state}"', owner),
        )

    records = wal_records_of(conn, lambda: checkpoint("first"), "threadline.run_journal")
    assert [kind.split("+")[0] for _, kind in records] == ["INSERT"], records
    checkpoint("again")
    kept = conn.execute(
        "select state from threadline.run_journal where run_id = %s and name = 'probe'", (run_id,)
    ).fetchall()
    assert [r["state"] for r in kept] == ["again"]
