"""Wake-ups go out after the commit (migration 030, engine_adapter/store/waking.py): a Threadline
connection's transaction never holds Postgres' notify lock through its flush, and what it wakes
is still said once it has committed, and never when it rolled back."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psycopg
import pytest

from console import live
from engine_adapter.runs import retention
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db

CHANNEL = "threadline_test_wakes"


@pytest.fixture
def listener(db_url: str):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"listen {CHANNEL}")
        yield conn


def heard(listener: psycopg.Connection, wait: float = 0.3) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=wait)]


def wake(conn: psycopg.Connection, payload: str) -> None:
    conn.execute("select threadline.wake(%s, %s)", (CHANNEL, payload))


def test_a_transactions_wakes_go_out_once_after_its_commit(db_url, listener):
    with db.connect(db_url) as conn:
        with conn.transaction():
            wake(conn, "a")
            wake(conn, "b")
            wake(conn, "a")  # said twice, sent once (as Postgres folds a transaction's repeats)
            assert heard(listener, 0.2) == []
        assert heard(listener) == ["a", "b"]
        wake(conn, "c")  # a statement outside a transaction commits on its own
        assert heard(listener) == ["c"]


def test_a_rollback_or_a_failed_statement_wakes_nobody(db_url, listener):
    with db.connect(db_url) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            wake(conn, "rolled back")
            raise RuntimeError("abort")
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("select threadline.wake(%s, 'failed'), 1 / 0", (CHANNEL,))
        wake(conn, "after")
        assert heard(listener) == ["after"]


def test_without_a_commit_callback_wake_notifies_in_the_transaction(db_url, listener):
    # psql, absurdctl or a script: no client collects the notices, so the database notifies.
    with psycopg.connect(db_url, autocommit=True) as plain:
        with plain.transaction():
            wake(plain, "plain")
        assert heard(listener) == ["plain"]


def test_a_non_autocommit_connection_wakes_at_its_commit(db_url, listener):
    conn = db.connect(db_url, autocommit=False)
    try:
        wake(conn, "pending")
        assert heard(listener, 0.2) == []
        conn.commit()
        assert heard(listener) == ["pending"]
        wake(conn, "dropped")
        conn.rollback()
        assert heard(listener, 0.2) == []
    finally:
        conn.close()


def test_the_schemas_functions_wake_instead_of_notifying(conn):
    rows = conn.execute(
        "select p.proname from pg_proc p"
        " where p.pronamespace = 'threadline'::regnamespace and p.prosrc like '%%pg_notify(%%'"
    ).fetchall()
    assert sorted(r["proname"] for r in rows) == ["send_wakes", "wake"]


def test_the_data_transaction_itself_notifies_nobody(db_url, listener):
    # A connection that asks for wakes after commit but never sends them (as a process killed
    # just after its commit): the transaction itself queued no notification, so it took no notify
    # lock. Listeners find such work on their timers.
    with psycopg.connect(db_url, autocommit=True) as silent:
        silent.execute("set threadline.wakes_after_commit = on")
        with silent.transaction():
            wake(silent, "never sent")
        assert heard(listener) == []


def test_a_process_that_exits_at_once_still_sends_its_wakes(db_url, listener):
    # `threadline spawn` commits and exits: its wake-up must not die with it.
    code = (
        "import sys\n"
        "from engine_adapter.store import db\n"
        "conn = db.connect(sys.argv[1])\n"
        f"conn.execute(\"select threadline.wake('{CHANNEL}', 'from a short process')\")\n"
    )
    subprocess.run([sys.executable, "-c", code, db_url], check=True, timeout=60)
    assert heard(listener) == ["from a short process"]


def test_many_threads_wakes_all_arrive(db_url, listener):
    def wake_some(n: int) -> None:
        with db.connect(db_url) as conn:
            for i in range(20):
                with conn.transaction():
                    wake(conn, f"{n}-{i}")

    threads = [threading.Thread(target=wake_some, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    got: set[str] = set()
    deadline = time.monotonic() + 10
    while len(got) < 80 and time.monotonic() < deadline:
        got.update(heard(listener, 0.5))
    assert got == {f"{n}-{i}" for n in range(4) for i in range(20)}


def test_the_change_feed_is_said_only_while_a_console_follows_it(db_url, apply):
    with psycopg.connect(db_url, autocommit=True) as feed, db.connect(db_url) as conn:
        feed.execute(f"listen {live.CHANNEL}")
        apply("slug: feed-a\nsteps:\n  - {id: s1, run_command: 'true'}\n")
        assert heard(feed) == []  # nobody follows: the workflow's change is said to nobody
        with db.connect(db_url) as console:
            console.execute("select threadline.follow_feed()")
            apply("slug: feed-b\nsteps:\n  - {id: s1, run_command: 'true'}\n")
            assert "workflows:" in heard(feed)
            run_id = spawn(conn, "feed-b").run_id  # a run's change names its run
            assert f"run_threads:{run_id}" in heard(feed)
        conn.execute("select threadline.wake(%s, 'after')", (live.CHANNEL,))
        assert heard(feed) == []  # the console has gone


def test_following_the_feed_keeps_no_other_job_waiting(conn, db_url):
    # The feed's lock is its own: a console open for days must not stop the cleanup job.
    with db.connect(db_url) as console:
        console.execute("select threadline.follow_feed()")
        assert retention.cleanup(conn, "test") is not None
