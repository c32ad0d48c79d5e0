"""The processes of one host share one LISTEN connection (host_listener.py): one of them holds
the lock, listens for all and forwards each notification to the others' sockets; when it dies,
another takes over. THREADLINE_HOST_LISTENER=off: each process listens on its own, as before."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from engine_adapter.model.errors import Invalid
from engine_adapter.runs.spawn import spawn
from engine_adapter.store import db, host_listener, meeting
from engine_adapter.store.host_listener import APP_NAME, HostListener
from engine_adapter.testing import harness

RECIPE = "slug: shared\nsteps:\n  - {id: s1, run_command: 'echo one'}\n"


def listening_backends(conn: psycopg.Connection) -> list[int]:
    """Backends of this database named as the host's shared listener."""
    rows = conn.execute(
        "select pid from pg_stat_activity where datname = current_database()"
        " and application_name = %s",
        (APP_NAME,),
    ).fetchall()
    return [row["pid"] for row in rows]


def sockets(where: Path) -> list[str]:
    return sorted(p.name for p in where.glob("*.sock")) if where.exists() else []


def lock_holder(where: Path) -> int | None:
    """The pid holding the leader's flock, from /proc/locks (Linux)."""
    inode = os.stat(where / host_listener.LOCK_NAME).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4])
    return None


def wait_completed(db_url: str, conn: psycopg.Connection, timeout: float = 30) -> float:
    started = time.monotonic()
    run_id = spawn(conn, "shared").run_id
    harness.wait_for_state(db_url, run_id, "completed", timeout=timeout)
    return time.monotonic() - started


def start_pairs(procs: harness.ProcessSet, env: dict[str, str] | None = None) -> None:
    for kind in ("conductor", "bots", "conductor", "bots"):
        procs.start(kind, env=env, wait=True)


def test_the_processes_of_a_host_share_one_listening_connection(db_url, conn, apply, procs):
    apply(RECIPE)
    start_pairs(procs)
    harness.wait_for(lambda: len(listening_backends(conn)) == 1, what="the shared listener")
    assert wait_completed(db_url, conn) < 30
    assert len(listening_backends(conn)) == 1
    where = meeting.meeting_dir(db_url)
    assert stat.S_IMODE(os.stat(where).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(where.parent).st_mode) == 0o700
    names = sockets(where)  # every member's, the leader's own too
    assert [n.split(".")[0] for n in names] == ["threadline"] * 2 + ["threadline_bots"] * 2
    assert lock_holder(where) in {p.pid for p in procs.procs}


def test_when_the_leader_is_killed_another_process_listens_for_the_host(db_url, conn, apply, procs):
    apply(RECIPE)
    start_pairs(procs)
    harness.wait_for(lambda: len(listening_backends(conn)) == 1, what="the shared listener")
    [backend] = listening_backends(conn)
    where = meeting.meeting_dir(db_url)
    leader = next(p for p in procs.procs if p.pid == lock_holder(where))
    harness.kill(leader, signal.SIGKILL)
    harness.wait_for(
        lambda: listening_backends(conn) not in ([], [backend]),
        timeout=10,
        what="another process listening for the host",
    )
    assert len(listening_backends(conn)) == 1
    assert lock_holder(where) in {p.pid for p in procs.procs if p.poll() is None}
    assert wait_completed(db_url, conn) < 30


def test_off_each_process_listens_on_its_own(db_url, conn, apply, procs):
    apply(RECIPE)
    start_pairs(procs, env={meeting.ENV: "off"})
    assert wait_completed(db_url, conn) < 30
    assert listening_backends(conn) == []
    assert sockets(meeting.meeting_dir(db_url)) == []


# -- in this process: what the listener hears and forwards --------------------------------------


@pytest.fixture
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A runtime directory of the test's own, its path short enough for a socket's address."""
    where = Path(tempfile.mkdtemp(prefix="tlw"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(where))
    monkeypatch.delenv(meeting.ENV, raising=False)
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def listeners(db_url: str, runtime_dir: Path) -> Iterator[list[HostListener]]:
    made: list[HostListener] = []
    yield made
    for listener in made:
        listener.close()


def wake(db_url: str, channel: str, payload: str) -> None:
    """A notification through the database, for the leader to forward (Threadline's own
    connections hand a wake-up to the host's processes directly: test_wakes_on_the_host.py)."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("select pg_notify(%s, %s)", (channel, payload))


def hand_over(db_url: str, channel: str, payload: str) -> None:
    """A wake-up as Threadline's connections send it: handed to the host's processes."""
    with db.connect(db_url) as c:
        c.execute("select threadline.wake(%s, %s)", (channel, payload))


def heard(listener: HostListener, wait: float = 3.0) -> list[str]:
    """The first note within `wait`, and whatever follows it closely."""
    got = list(listener.notes(timeout=wait, stop_after=1))
    return got + list(listener.notes(timeout=0.3)) if got else got


def listening(listener: HostListener) -> set[str]:
    assert listener._conn is not None
    rows = listener._conn.execute("select pg_listening_channels() as c").fetchall()
    return {row["c"] for row in rows}


def test_the_leader_forwards_each_channel_to_its_subscribers(db_url, listeners, runtime_dir):
    conductor = HostListener(db_url, "conductor", [db.NOTIFY_CHANNEL])
    listeners.append(conductor)
    bots = HostListener(db_url, "bots", [db.BOTS_CHANNEL])
    listeners.append(bots)
    assert conductor.leading and not bots.leading
    harness.wait_for(
        lambda: listening(conductor) == {db.NOTIFY_CHANNEL, db.BOTS_CHANNEL},
        timeout=5,
        what="the leader listening on the newcomer's channel",
    )
    wake(db_url, db.BOTS_CHANNEL, "instruction:r1")
    assert heard(bots) == ["instruction:r1"]
    wake(db_url, db.NOTIFY_CHANNEL, "spawn:r2")
    assert heard(conductor) == ["spawn:r2"]  # its own process's: straight to it
    assert heard(bots, 0.5) == []  # not its channel
    where = conductor.dir
    assert where is not None and where.parent.parent == runtime_dir

    # A member gone without a word leaves its socket; the next note sent to it removes it.
    dead = where / f"{db.BOTS_CHANNEL}.1.dead.sock"
    gone = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    gone.bind(str(dead))
    gone.close()
    wake(db_url, db.BOTS_CHANNEL, "instruction:r3")
    assert heard(bots) == ["instruction:r3"]
    assert not dead.exists()

    # A member whose socket was removed under it (a /tmp cleaner) binds again.
    [mine] = where.glob(f"{db.BOTS_CHANNEL}.*.sock")
    mine.unlink()
    harness.wait_for(
        lambda: list(where.glob(f"{db.BOTS_CHANNEL}.*.sock")), timeout=5, what="a new socket"
    )
    wake(db_url, db.BOTS_CHANNEL, "instruction:r3b")
    assert heard(bots) == ["instruction:r3b"]

    # The leader leaves: the other takes the lock within about a second and listens itself.
    conductor.close()
    assert sockets(where) == sorted(p.name for p in where.glob(f"{db.BOTS_CHANNEL}.*.sock"))
    harness.wait_for(lambda: bots.leading, timeout=5, what="the member taking over")
    harness.wait_for(
        lambda: bots._conn is not None and db.BOTS_CHANNEL in listening(bots),
        timeout=5,
        what="the new leader listening",
    )
    wake(db_url, db.BOTS_CHANNEL, "instruction:r4")
    assert heard(bots) == ["instruction:r4"]


def test_a_directory_others_may_write_is_not_used(db_url, listeners, runtime_dir, caplog):
    top = runtime_dir / f"threadline-wakes-{os.geteuid()}"
    top.mkdir(mode=0o700)
    top.chmod(0o777)
    listener = HostListener(db_url, "conductor", [db.NOTIFY_CHANNEL])
    listeners.append(listener)
    assert not listener.shared and "own" in caplog.text
    assert listening(listener) == {db.NOTIFY_CHANNEL}
    wake(db_url, db.NOTIFY_CHANNEL, "spawn:r1")
    assert heard(listener) == ["spawn:r1"]


def test_off_listens_on_a_connection_of_its_own(db_url, listeners, monkeypatch):
    monkeypatch.setenv(meeting.ENV, "off")
    one = HostListener(db_url, "conductor", [db.NOTIFY_CHANNEL])
    listeners.append(one)
    two = HostListener(db_url, "bots", [db.BOTS_CHANNEL])
    listeners.append(two)
    assert not one.shared and not two.shared
    assert listening(one) == {db.NOTIFY_CHANNEL} and listening(two) == {db.BOTS_CHANNEL}
    wake(db_url, db.BOTS_CHANNEL, "instruction:r1")
    assert heard(two) == ["instruction:r1"] and heard(one, 0.3) == []


def test_a_lost_database_ends_the_leaders_notes(db_url, conn, listeners):
    listener = HostListener(db_url, "conductor", [db.NOTIFY_CHANNEL])
    listeners.append(listener)
    assert listener.leading
    [backend] = listening_backends(conn)
    conn.execute("select pg_terminate_backend(%s)", (backend,))
    with pytest.raises(psycopg.OperationalError):
        list(listener.notes(timeout=5))


def test_a_bad_setting_is_named(db_url, monkeypatch):
    monkeypatch.setenv(meeting.ENV, "sometimes")
    with pytest.raises(Invalid, match=meeting.ENV):
        HostListener(db_url, "conductor", [db.NOTIFY_CHANNEL])


@pytest.mark.parametrize("send", [wake, hand_over], ids=["forwarded", "handed-over"])
def test_one_process_acts_on_each_notification_the_others_look(
    db_url, listeners, runtime_dir, send
):
    """Woken in every process, a wake-up made every one of them claim, all but one finding
    nothing: the leader (or the process handing a wake-up over) names one subscriber in turn
    to act; the others' lookers see it."""
    looked: dict[str, list[str]] = {"lead": [], "a": [], "b": []}
    made = {
        who: HostListener(db_url, "conductor", [db.NOTIFY_CHANNEL], looker=looked[who].append)
        for who in ("lead", "a", "b")
    }
    listeners.extend(made.values())
    assert made["lead"].leading and not made["a"].leading and not made["b"].leading
    payloads = [f"step.done:r{i}" for i in range(6)]
    for payload in payloads:
        send(db_url, db.NOTIFY_CHANNEL, payload)
    acted = {who: heard(listener) for who, listener in made.items()}
    # Each note acted on once, by each process in turn; every other process looked at it.
    assert sorted(p for notes in acted.values() for p in notes) == sorted(payloads)
    assert sorted(len(notes) for notes in acted.values()) == [2, 2, 2], acted
    for who in made:
        assert sorted(acted[who] + looked[who]) == sorted(payloads), who
