"""A wake-up that a process of this host takes goes to it directly, through the host's meeting
directory (meeting.hand_over), not through the database: no NOTIFY to send and none for the host's
listener to read. It goes through the database when no process here takes its channel, when the
shared listener is off, and, for a step's done wake-up, when the conductor holding the run is on
another host (migration 059: the notice's hint names the holder's host). A dead process's socket
is passed over and removed; a directory others may write is not used."""

from __future__ import annotations

import socket
import uuid

import psycopg
import pytest

from engine_adapter.model.settings import QUEUE
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db, meeting
from tests.host_ear import HostEar

RECIPE = "slug: held\nsteps:\n  - {id: a, run_command: 'true'}\n"


@pytest.fixture
def database_ear(db_url: str):
    """What reaches the conductors' channel through the database."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"listen {db.NOTIFY_CHANNEL}")
        yield conn


def through_database(ear: psycopg.Connection, wait: float = 0.5) -> list[str]:
    return [n.payload for n in ear.notifies(timeout=wait)]


@pytest.fixture
def member(db_url: str, database_ear: psycopg.Connection):
    # The database's listener comes first, so the member (leading the host) hears the database too.
    joined = HostEar(db_url, "conductor", db.NOTIFY_CHANNEL)
    with joined.listener:
        yield joined


def test_a_wake_up_goes_to_the_hosts_process_not_the_database(db_url, member, database_ear):
    with db.connect(db_url) as conn:
        conn.execute("select threadline.wake(%s, %s)", (db.NOTIFY_CHANNEL, "spawn:one"))
    assert member.heard() == ["spawn:one"]
    assert through_database(database_ear) == []


def test_with_no_process_here_taking_it_a_wake_up_goes_through_the_database(db_url, database_ear):
    with db.connect(db_url) as conn:
        conn.execute("select threadline.wake(%s, %s)", (db.NOTIFY_CHANNEL, "spawn:two"))
    assert through_database(database_ear) == ["spawn:two"]


def test_with_the_shared_listener_off_a_wake_up_goes_through_the_database(
    db_url, member, database_ear, monkeypatch
):
    monkeypatch.setenv(meeting.ENV, "off")
    with db.connect(db_url) as conn:
        conn.execute("select threadline.wake(%s, %s)", (db.NOTIFY_CHANNEL, "spawn:three"))
    assert through_database(database_ear) == ["spawn:three"]


def held_run(conn: psycopg.Connection, host: str) -> str:
    """A run claimed (held) by a conductor registered on `host`, its step's key armed."""
    run_id = str(spawn(conn, "held").run_id)
    worker = f"conductor-{host}-1-{uuid.uuid4().hex[:6]}"
    conn.execute(
        "insert into threadline.workers (id, kind, host, pid, lock_key, version)"
        " values (%s, 'conductor', %s, 1, 424242, 'test')",
        (worker, host),
    )
    claimed = conn.execute(
        "select task_id from absurd.claim_task(%s, %s, 30, 1)", (QUEUE, worker)
    ).fetchall()
    assert [str(row["task_id"]) for row in claimed] == [run_id]
    return run_id


def emit_done(db_url: str, run_id: str) -> None:
    with db.connect(db_url) as conn:
        conn.execute(
            "select threadline.emit_step_done(%s, %s, %s, '{}'::jsonb)",
            (QUEUE, run_id, f"{run_id}:a:1"),
        )


@pytest.mark.parametrize("holder", ["here", "elsewhere"])
def test_a_step_done_stays_on_the_host_only_where_its_runs_holder_is(
    db_url, conn, apply, member, database_ear, holder
):
    apply(RECIPE)
    host = socket.gethostname() if holder == "here" else f"not-{socket.gethostname()}"
    run_id = held_run(conn, host)
    through_database(database_ear, 0.2)  # the spawn's
    member.heard(0.2)
    emit_done(db_url, run_id)
    done = f"step.done:{run_id}"
    if holder == "here":
        assert (member.heard(), through_database(database_ear)) == ([done], [])
    else:  # the holder's host hears it through the database (here, the member leads the host)
        assert through_database(database_ear) == [done]
        assert member.heard() == [done]


def test_a_dead_processs_socket_is_passed_over_and_removed(db_url, database_ear):
    """A process killed without leaving (SIGKILL) leaves its socket file: the wake-up finds no
    reader there, removes the file and, with no one else here, goes through the database."""
    here = meeting.meeting_dir(db_url)
    path = here / f"{db.NOTIFY_CHANNEL}.999999.dead{meeting.SOCK_SUFFIX}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as dead:
        dead.bind(str(path))
    assert path.exists()
    with db.connect(db_url) as conn:
        conn.execute("select threadline.wake(%s, %s)", (db.NOTIFY_CHANNEL, "spawn:four"))
    assert through_database(database_ear) == ["spawn:four"]
    assert not path.exists()


def test_a_directory_others_may_write_is_not_used(db_url, member, database_ear, monkeypatch):
    """Where another user could have put a socket, no wake-up is handed to it: the directory is
    checked again once its trust has run out (immediately here)."""
    monkeypatch.setattr(meeting, "TRUST_DIR_S", 0.0)
    with db.connect(db_url) as conn:
        conn.execute("select threadline.wake(%s, %s)", (db.NOTIFY_CHANNEL, "spawn:trusted"))
    assert member.heard() == ["spawn:trusted"]
    here = meeting.meeting_dir(db_url)
    here.chmod(0o777)
    try:
        with db.connect(db_url) as conn:
            conn.execute("select threadline.wake(%s, %s)", (db.NOTIFY_CHANNEL, "spawn:five"))
        assert through_database(database_ear) == ["spawn:five"]
    finally:
        here.chmod(0o700)


def test_the_directory_is_checked_once_a_second_not_at_every_wake_up(
    db_url, member, database_ear, monkeypatch
):
    """A wake-up is handed over at every spawn, SEND and report: the directory's check (two
    lstat calls and its path worked out) is made once while its trust lasts."""
    checked = []
    check = meeting._check_ours
    monkeypatch.setattr(meeting, "_check_ours", lambda path: checked.append(path) or check(path))
    monkeypatch.setattr(meeting, "TRUST_DIR_S", 60.0)
    database = meeting.database_key(db_url)
    meeting._trusted.pop(database, None)
    for i in range(5):
        assert meeting.hand_over(database, db.NOTIFY_CHANNEL, f"spawn:{i}")
    assert member.heard() == [f"spawn:{i}" for i in range(5)]
    assert len(checked) == 2  # the user's directory and the database's, once
    monkeypatch.setattr(meeting, "TRUST_DIR_S", 0.0)
    assert meeting.hand_over(database, db.NOTIFY_CHANNEL, "spawn:again")
    assert len(checked) == 4


def test_a_bad_setting_never_fails_the_committed_statement(
    db_url, member, database_ear, monkeypatch
):
    """The statement has committed when its wake-ups go out: a setting gone wrong since the
    process started sends them through the database and raises nothing."""
    monkeypatch.setenv(meeting.ENV, "sometimes")
    with db.connect(db_url) as conn:
        conn.execute("select threadline.wake(%s, %s)", (db.NOTIFY_CHANNEL, "spawn:six"))
    assert through_database(database_ear) == ["spawn:six"]
